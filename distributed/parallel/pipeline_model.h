// PipelineModel: a GPT or Llama cut into pipeline stages over the mesh's pp dimension
// (distributed/pipeline), its copies along dp kept in step by averaging each stage's gradients
// over the dp group. A step is a schedule (GPipe or 1F1B) over the stages, not one forward of
// train_module(): a program asks pipelined() and calls forward_backward for the whole step. Every
// rank keeps the whole model object (what it does not train is refreshed from the stages'
// owners before evaluating and saving); its optimizer holds the stage's parameters. Checkpoints
// are in the whole layout (Note [Whole-layout checkpoints]). With a tp group the model's blocks are
// already split over it (parallelize_tensor) and every sum and checkpoint also goes over tp.
// Leaves out: ZeRO or FSDP together with pp, sequence parallel, mixed precision, CUDA graphs,
// freeing the blocks a stage does not run.
#pragma once

#include <memory>
#include <unordered_map>

#include "distributed/parallel/parallel_model.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "distributed/pipeline/schedule.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

class PipelineModel : public ParallelModel {
 public:
  // `whole_opt` is the program's optimizer over the whole model (never stepped: its groups and
  // numbering are the whole layout's); the stage's optimizer is made like it over this stage's
  // parameters. pp's rank is the stage; dp averages the gradients of the stage's copies; tp (null:
  // none) is the group the blocks are split over.
  PipelineModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> whole_opt,
                std::shared_ptr<ProcessGroup> pp, std::shared_ptr<ProcessGroup> dp,
                PipelineSchedule schedule, std::shared_ptr<ProcessGroup> tp = nullptr);

  bool pipelined() const override { return true; }
  // The step's forwards and backwards over every stage, the batch (B, T) cut into micro_batches;
  // the stage's gradients averaged over dp. Returns the batch's mean loss on every rank.
  Tensor forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches) override;

  nn::Module& train_module() override { return *model_; }  // not what a pipelined step calls
  nn::Module& eval_module() override;                      // the whole model, refreshed
  optim::Optimizer& optimizer() override { return *opt_; }
  std::string describe() const override;

  nn::StateDict model_state_dict() override;
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;
  nn::StateDict optimizer_state_dict() override;
  void load_optimizer_state_dict(const nn::StateDict& whole) override;
  void with_whole_model(const std::function<void()>& f) override;
  void check_capturable(const char* what) const override;
  Memory memory() const override;

 private:
  void refresh_whole_model();  // every parameter from its stage's rank (a collective over pp)
  void set_model_share();      // Note [Optimizing a share of a model]: over pp (and tp)

  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> whole_opt_, opt_;
  std::shared_ptr<ProcessGroup> pp_, dp_, tp_;
  PipelineSchedule schedule_;
  std::unique_ptr<PipelineStage> stage_;
  std::unordered_map<const TensorImpl*, int> owner_;  // each parameter's stage (a tied one: 0)
};

}  // namespace loom::distributed
