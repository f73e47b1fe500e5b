// PipelineModel: a GPT or Llama cut into pipeline stages over the mesh's pp dimension
// (distributed/pipeline), its copies along dp kept in step by averaging each stage's gradients
// over the dp group. A step is a schedule (GPipe, 1F1B, or interleaved 1F1B with V chunks per rank:
// Note [Interleaved 1F1B] in distributed/pipeline/interleaved_schedule.h) over the stages, not one
// forward of train_module(): a program asks pipelined() and calls forward_backward for the step.
// Evaluation is a forward-only pass over the stages (eval_forward). A rank holds only its stage's
// parameters (Note [A pipeline rank holds its stage]); its optimizer holds the stage's trainable
// ones. Checkpoints are in the whole layout (Note [Whole-layout checkpoints]), gathered on each
// pipeline's first rank. With a tp group the model's blocks are already split over it
// (parallelize_tensor) and every sum and checkpoint also goes over tp. With ZeRO-1 or 2 the
// stage's optimizer state is sharded over dp (Note [ZeRO over a pipeline stage]); with ZeRO-3 its
// parameters too, FSDP over the stage's copies (Note [FSDP over a pipeline stage] in
// distributed/fsdp/fsdp.h; with tp each tp rank shards its own share: Note [FSDP over a
// tensor-parallel pipeline stage] in distributed/parallel/stage_shards.h). Leaves out: FSDP with
// the interleaved schedule (parallelize refuses it), FSDP's mixed precision (under pp --amp bf16 is
// the schedule's autocast), CUDA graphs, the whole model on one rank (with_whole_model refuses:
// gather a state_dict instead).
#pragma once

#include <memory>
#include <unordered_map>

#include "distributed/parallel/parallel_model.h"
#include "distributed/parallel/stage_shards.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "distributed/pipeline/schedule.h"
#include "distributed/process_group/process_group.h"
#include "distributed/tensor_parallel/tp_checkpoint.h"
#include "distributed/zero/zero_optimizer.h"

namespace loom::distributed {

// Note [A pipeline rank holds its stage]
// parallelize builds the whole model on every rank (one seed, so every rank's initial weights are
// the same as one process's), then PipelineModel releases the storage of every parameter that this
// rank's stage does not compute with (Note [Released storage] in core/storage.h): the tensors keep
// their names, shapes and dtypes, so the model's state_dict still names the whole model and the
// optimizer's numbering is the whole one, but their memory is gone and reading one is an error
// naming the stage. What stays: the first stage's embedding (and GPT's positions), the stage's
// blocks, the last stage's final norm and head (a tied head on the first and the last), and every
// buffer. memory() counts what stays. Saving, each stage makes its tensors whole (over tp) and
// sends them to the pipeline's first rank under the whole model's names; loading, each stage takes
// its own tensors out of the whole state_dict. Sampling or exporting after training builds the
// whole model from that gathered state_dict on rank 0 (examples/train_gpt.cpp), as after --tp.
class PipelineModel : public ParallelModel {
 public:
  // `whole_opt` is the program's optimizer over the whole model (never stepped: its groups and
  // numbering are the whole layout's); the stage's optimizer is made like it over this stage's
  // parameters. pp's rank is the stage; dp averages the gradients of the stage's copies; tp (null:
  // none) is the group the blocks are split over; zero (1 or 2) shards the stage's gradients and
  // optimizer state over dp (a ZeroOptimizer over the stage's optimizer), 3 its parameters too
  // (FSDP over the stage's modules, each tp rank's share under tp; not with V > 1); virtual_stages
  // (V, 2 or more with the interleaved schedule, else 1) is how many chunks each rank holds: its
  // "stage" is then those V chunks (rank_chunks); pp_gradients (null: pp) is a second group of
  // pp's members that the gradients travel back on (Note [Two groups for a pipeline's messages];
  // NCCL needs it).
  PipelineModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> whole_opt,
                std::shared_ptr<ProcessGroup> pp, std::shared_ptr<ProcessGroup> dp,
                PipelineSchedule schedule, std::shared_ptr<ProcessGroup> tp = nullptr, int zero = 0,
                int virtual_stages = 1, std::shared_ptr<ProcessGroup> pp_gradients = nullptr);

  bool pipelined() const override { return true; }
  // The step's forwards and backwards over every stage, the batch (B, T) cut into micro_batches;
  // the stage's gradients averaged over dp. Returns the batch's mean loss on every rank.
  Tensor forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches,
                          std::optional<DType> autocast, amp::GradScaler* scaler) override;

  nn::Module& train_module() override { return *model_; }  // not what a pipelined step calls
  // The model with only this stage's parameters (for eval() and train()); its forward is refused.
  nn::Module& eval_module() override { return *model_; }
  // FSDP (zero 3): each forward gathers the stage's units over dp, so every dp rank must run as
  // many (Note [Sharded evaluation] in train/evaluate.h).
  bool eval_forwards_are_collectives() const override { return fsdp_ != nullptr; }
  // Note [Forward-only pipeline]: the logits on the last stage's ranks (tp rank 0 under tp: the
  // others compute the same), undefined on the other ranks. A collective over pp (and tp).
  Tensor eval_forward(const Tensor& x) override;
  optim::Optimizer& optimizer() override;  // ZeRO's under zero 1 or 2, else the stage's
  const optim::Optimizer& plain_optimizer() override { return *opt_; }
  std::string describe() const override;

  // The whole model's state on each pipeline's first rank (pp rank 0), empty on the others.
  nn::StateDict model_state_dict() override;
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;
  nn::StateDict optimizer_state_dict() override;
  void load_optimizer_state_dict(const nn::StateDict& whole) override;
  void with_whole_model(const std::function<void()>& f) override;
  void check_capturable(const char* what) const override;
  Memory memory() const override;

 private:
  void release_other_stages();  // Note [A pipeline rank holds its stage]
  void set_model_share();       // Note [Optimizing a share of a model]: over pp (and tp)
  // `mine` (on the owner stage's ranks: the whole tensor) on pp rank 0, received into a tensor of
  // `like`'s dtype and device and shape `shape`; undefined on the other ranks. A send and a recv.
  Tensor to_first_stage(const Tensor& mine, int owner, const Tensor& like, const Shape& shape,
                        int tag);
  // The stage optimizer's state `local` in the whole numbering ("state.<whole i>.<buffer>"), the
  // split parameters' buffers gathered whole over tp (a collective over tp).
  nn::StateDict stage_optimizer_state(const nn::StateDict& local);
  Shape whole_shape(const Tensor& p) const;  // p's shape, a split one's whole along its dim

  std::shared_ptr<nn::Module> model_;
  std::unique_ptr<optim::Optimizer> whole_opt_, opt_;
  std::shared_ptr<ProcessGroup> pp_, dp_, tp_;
  std::shared_ptr<ProcessGroup> pp_gradients_;  // null: the gradients go back on pp_
  PipelineSchedule schedule_;
  std::vector<std::unique_ptr<PipelineStage>> stages_;  // this rank's chunks (V = 1: its stage)
  std::vector<PipelineStage*> chunks_;                  // the same, for the schedules
  std::unordered_map<const TensorImpl*, int> owner_;    // each parameter's stage (a tied one: 0)
  std::unordered_map<const TensorImpl*, TensorShare> shares_;  // under tp: the split parameters
  std::unique_ptr<StageShards> shards_;             // zero 1 or 2: the gradients' shards over dp
  std::shared_ptr<FullyShardedDataParallel> fsdp_;  // zero 3: the stage's modules sharded
  std::unique_ptr<ZeroOptimizer> zero_;             // over opt_, stepping this rank's shards
};

}  // namespace loom::distributed
