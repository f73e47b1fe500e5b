// TensorParallelModel: a model whose transformer blocks are split over the tensor-parallel ranks
// of a mesh (distributed/tensor_parallel/tensor_parallel.h), and whose copies along the mesh's
// data-parallel dimension are kept in step by an inner ParallelModel over that dimension's group
// (DDP, or the model alone when dp is 1). It adds what the split changes: sums over the whole
// model's gradients (clip, GradScaler) go over the tp ranks (Note [Optimizing a share of a
// model]), and checkpoints are gathered to, and cut from, the whole layout (Note [Whole-layout
// checkpoints]). The inner kind may be ZeRO or FSDP over dp: it shards the tp shares further.
// Leaves out: the vocabulary split (the embedding and head stay whole) and pipeline stages
// (pipeline_model.h splits its own blocks).
#pragma once

#include <memory>

#include "distributed/parallel/parallel_model.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

class TensorParallelModel : public ParallelModel {
 public:
  // `model` is already split over `tp`; `inner` keeps its dp copies in step and owns the
  // optimizer (made over the split model's parameters).
  // `sequence_parallel`: the blocks run on T/tp positions each (Note [Sequence parallel] in
  // distributed/tensor_parallel/sequence_parallel.h), and finish_gradients sums the norms' partial
  // gradients over tp, unless `summed_in_backward` (ZeRO and FSDP sum them before each bucket or
  // unit is reduce-scattered, which leaves nothing whole to sum after backward).
  TensorParallelModel(std::shared_ptr<nn::Module> model, std::shared_ptr<ProcessGroup> tp,
                      std::unique_ptr<ParallelModel> inner, bool sequence_parallel = false,
                      bool summed_in_backward = false);

  nn::Module& train_module() override { return inner_->train_module(); }
  nn::Module& eval_module() override { return inner_->eval_module(); }
  optim::Optimizer& optimizer() override { return inner_->optimizer(); }
  const optim::Optimizer& plain_optimizer() override { return inner_->plain_optimizer(); }
  std::string describe() const override;
  std::unique_ptr<Pause> no_sync() override { return inner_->no_sync(); }
  void finish_gradients() override;
  void sync_buffers() override { inner_->sync_buffers(); }
  void on_backward_computed(std::function<void()> f) override {
    inner_->on_backward_computed(std::move(f));
  }

  nn::StateDict model_state_dict() override;
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;
  nn::StateDict optimizer_state_dict() override;
  void load_optimizer_state_dict(const nn::StateDict& whole) override;
  void with_whole_model(const std::function<void()>& f) override;

  void check_capturable(const char* what) const override { inner_->check_capturable(what); }
  void prepare_for_capture() override { inner_->prepare_for_capture(); }
  void before_replay(int64_t forwards) override { inner_->before_replay(forwards); }
  void after_replay() override { inner_->after_replay(); }
  Memory memory() const override { return inner_->memory(); }

 private:
  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<ProcessGroup> tp_;
  std::unique_ptr<ParallelModel> inner_;
  bool sequence_parallel_ = false;
  bool summed_in_backward_ = false;
};

}  // namespace loom::distributed
