// TensorParallelModel: see distributed/parallel/tensor_parallel_model.h.
#include "distributed/parallel/tensor_parallel_model.h"

#include <unordered_set>

#include "core/error.h"
#include "distributed/tensor_parallel/sequence_parallel.h"
#include "distributed/tensor_parallel/tensor_parallel.h"
#include "distributed/tensor_parallel/tp_checkpoint.h"

namespace loom::distributed {

TensorParallelModel::TensorParallelModel(std::shared_ptr<nn::Module> model,
                                         std::shared_ptr<ProcessGroup> tp,
                                         std::unique_ptr<ParallelModel> inner,
                                         bool sequence_parallel, bool summed_in_backward)
    : model_(std::move(model)),
      tp_(std::move(tp)),
      inner_(std::move(inner)),
      sequence_parallel_(sequence_parallel),
      summed_in_backward_(summed_in_backward) {
  // Note [Optimizing a share of a model]: the shares count on every rank, the whole parameters
  // on tp rank 0 only; sums go over the tp group.
  std::unordered_set<const TensorImpl*> shares;
  for (const auto& [impl, share] : tensor_shares(*model_)) shares.insert(impl);
  const bool first = tp_->rank() == 0;
  ProcessGroup* tp_group = tp_.get();
  optimizer().set_model_share(
      {.counted = [shares, first](const Tensor& p) { return first || shares.count(p.impl()); },
       .sum = [tp_group](Tensor& t) { tp_group->all_reduce(t, ReduceOp::Sum)->wait(); }});
}

std::string TensorParallelModel::describe() const {
  return std::string(sequence_parallel_ ? "tensor and sequence parallel" : "tensor parallel") +
         " over " + std::to_string(tp_->size()) + " ranks, copies: " + inner_->describe();
}

void TensorParallelModel::finish_gradients() {
  inner_->finish_gradients();
  if (sequence_parallel_ && !summed_in_backward_)
    sync_sequence_parallel_grads(*model_, *tp_);  // after DDP's all-reduce, with which it commutes
}

nn::StateDict TensorParallelModel::model_state_dict() {
  nn::StateDict sd;  // FSDP over dp: the shares gathered over dp while f runs, then released
  inner_->with_whole_model([&] { sd = host_copy(whole_state_dict(*model_)); });
  return sd;
}

void TensorParallelModel::load_model_state_dict(const nn::StateDict& whole,
                                                const StateCheck& check) {
  inner_->load_model_state_dict(share_of_state_dict(*model_, whole), check);
}

// The inner kind's state (ZeRO's gathered over dp) in the numbering of the program's optimizer,
// each split parameter's buffers then gathered over tp; loading, the reverse.
nn::StateDict TensorParallelModel::optimizer_state_dict() {
  return whole_optimizer_state(*model_, plain_optimizer(), inner_->optimizer_state_dict());
}

void TensorParallelModel::load_optimizer_state_dict(const nn::StateDict& whole) {
  inner_->load_optimizer_state_dict(share_of_optimizer_state(*model_, plain_optimizer(), whole));
}

void TensorParallelModel::with_whole_model(const std::function<void()>& f) {
  (void)f;
  LOOM_FAIL("tensor parallel: the model is split over ", tp_->size(),
            " ranks and never whole on one; save a checkpoint (the whole layout) and load it "
            "into one process to sample or export it");
}

}  // namespace loom::distributed
