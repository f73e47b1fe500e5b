// ParallelModel: a model as distributed::parallelize spread it over the processes (one process
// alone, DDP, ZeRO-1/2, FSDP, tensor parallel with or without DDP over the data-parallel ranks),
// behind the one interface the training step, evaluation, checkpoints and the memory report talk
// to. LocalModel is the one-process case. Leaves out: choosing and building the kind
// (parallelize.h), each kind's own work (distributed/ddp, zero, fsdp, tensor_parallel).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "nn/amp/grad_scaler.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"

namespace loom::distributed {

// Note [One interface for parallelism]
// A program builds its plain model, hands it to parallelize with a plan (--zero, --tp) and a way
// to make its optimizer, and from then on sees only this interface:
//   train_module()  what the training step calls (forward, loss): the model, or the wrapper whose
//                   backward reduces the gradients (DDP, FSDP);
//   eval_module()   what evaluation calls (the model, or FSDP's wrapper, which gathers), through
//                   eval_forward() (a pipeline's forward-only pass over its stages);
//   optimizer()     what steps (the program's optimizer, or ZeRO's over it);
//   no_sync()       held around all but the last micro-batch of an accumulated step;
//   finish_gradients()  after the step's last backward (sequence parallel's sums over tp);
//   state dicts     in the layout of the whole, unsplit model, whatever the kind: a checkpoint
//                   saved at one layout resumes at any other (Note [Whole-layout checkpoints]);
//   capture hooks   what --cuda-graph must do before capturing and around each replay;
//   memory()        this rank's bytes of parameters, gradients and optimizer state.
// Each kind answers for itself; nothing in train/ asks which kind it is.
class ParallelModel {
 public:
  virtual ~ParallelModel() = default;

  virtual nn::Module& train_module() = 0;
  // What evaluates. When eval_forwards_are_collectives() (FSDP gathers parameters in each
  // forward), every rank must run as many forwards (Note [Sharded evaluation] in train/evaluate.h).
  virtual nn::Module& eval_module() { return train_module(); }
  virtual bool eval_forwards_are_collectives() const { return false; }
  // Evaluation's forward of a batch x (no gradients; eval_module() in eval mode): the logits, or
  // an undefined tensor on a rank whose answers another rank counts (a pipeline's stages before the
  // last: Note [Forward-only pipeline] in distributed/pipeline/schedule.h). The ranks of one
  // data-parallel replica call it with the same batches.
  virtual Tensor eval_forward(const Tensor& x) { return eval_module()(x); }
  virtual optim::Optimizer& optimizer() = 0;
  // The optimizer the program made, over this rank's parameters: it numbers the parameters of the
  // optimizer's state dicts ("state.<i>.exp_avg"), also where ZeRO steps in its place.
  virtual const optim::Optimizer& plain_optimizer() { return optimizer(); }
  // Pipeline parallel: the step's forwards and backwards run as a schedule over the stages, not
  // as train_module()'s forward and a backward; a program whose model is pipelined() calls
  // forward_backward for the whole step, whose micro-batches are the schedule's, with the
  // forwards under `autocast` (--amp bf16 or fp16) and the backwards without, the loss scaled by
  // `scaler` (--amp fp16; null: unscaled).
  virtual bool pipelined() const { return false; }
  virtual Tensor forward_backward(const Tensor& x, const Tensor& y, int64_t micro_batches,
                                  std::optional<DType> autocast = std::nullopt,
                                  amp::GradScaler* scaler = nullptr);
  // "one process", "DDP over 2 processes", "tp 2 x dp 2 (DDP)": for the run's opening line.
  virtual std::string describe() const = 0;

  // Gradient accumulation: while the returned guard lives, backward only adds into .grad and the
  // reduction waits for the first backward after it (DDP's no_sync); null where every backward
  // may reduce (one process, FSDP: Note [FSDP]).
  struct Pause {  // undoes itself when destroyed
    virtual ~Pause() = default;
  };
  virtual std::unique_ptr<Pause> no_sync() { return nullptr; }
  // After the step's last backward, before the clip and the update: completes the gradients
  // where a kind must (sequence parallel sums its norms' partial gradients over tp). A collective
  // for such a kind; train::accumulate calls it.
  virtual void finish_gradients() {}
  // Rank 0's buffers (BatchNorm statistics) to every rank, before evaluating. A collective.
  virtual void sync_buffers() {}
  // Calls f when backward's compute ends and only its gradient reduction is left (--profile's
  // BackwardComputed mark); kinds without a reduction in backward ignore it.
  virtual void on_backward_computed(std::function<void()> f) { (void)f; }

  // ---- checkpoints, in the whole model's layout (collectives: every rank calls them) ----
  // The state_dict of the whole, unsplit model, on every rank that saves (rank 0 at least).
  virtual nn::StateDict model_state_dict() = 0;
  // Loads a whole model's state_dict (every rank takes its share). `check`, when given, first
  // sees this rank's model's own state_dict (the whole model's names and dtypes) and may refuse.
  using StateCheck = std::function<void(const nn::StateDict& mine)>;
  virtual void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check = {}) = 0;
  // The optimizer's state in the layout the program's optimizer over the whole model would save.
  virtual nn::StateDict optimizer_state_dict() { return optimizer().state_dict(); }
  virtual void load_optimizer_state_dict(const nn::StateDict& whole) {
    optimizer().load_state_dict(whole);
  }
  // Runs f with the whole model's parameters in the model's own modules (FSDP gathers them for
  // the call, with writeback: what f changes is kept), for sampling and saving after training. A
  // collective; kinds whose model is never whole on one rank (tensor parallel) refuse.
  virtual void with_whole_model(const std::function<void()>& f) { f(); }

  // ---- --cuda-graph (Note [The training step as a CUDA graph] in train/cuda_graph_step.h) ----
  // Errors with the reason when this kind's step cannot be captured; `what` names the flag.
  virtual void check_capturable(const char* what) const { (void)what; }
  // After at least one eager step, before the capture (DDP rebuilds its buckets now).
  virtual void prepare_for_capture() {}
  // Before and after each replay of a captured step holding `forwards` training forwards.
  virtual void before_replay(int64_t forwards) { (void)forwards; }
  virtual void after_replay() {}

  // This rank's bytes of parameters, gradients (DDP: its buckets) and optimizer state.
  struct Memory {
    int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  };
  virtual Memory memory() const = 0;
};

// Parameters, .grad and optimizer state of `model` and `opt` as they are on this rank: what a kind
// without its own accounting reports.
ParallelModel::Memory plain_memory(nn::Module& model, const optim::Optimizer& opt);

// Every tensor of `sd` copied to host memory: what stays valid after FSDP releases a gathered
// model.
nn::StateDict host_copy(const nn::StateDict& sd);

// One process: the model and the program's optimizer as they are.
class LocalModel : public ParallelModel {
 public:
  LocalModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt);
  // Not owning: for code that keeps its model and optimizer itself (train::StepRunner).
  LocalModel(nn::Module& model, optim::Optimizer& opt);

  nn::Module& train_module() override { return model_; }
  optim::Optimizer& optimizer() override { return opt_; }
  std::string describe() const override { return "one process"; }
  nn::StateDict model_state_dict() override { return model_.state_dict(); }
  void load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) override;
  Memory memory() const override { return plain_memory(model_, opt_); }

 private:
  std::shared_ptr<nn::Module> owned_model_;
  std::unique_ptr<optim::Optimizer> owned_opt_;
  nn::Module& model_;
  optim::Optimizer& opt_;
};

}  // namespace loom::distributed
