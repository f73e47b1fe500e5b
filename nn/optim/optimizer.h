// Optimizer: the base of SGD, Adam and AdamW. It holds parameter groups, per-parameter state
// (a step count and buffers such as exp_avg), zero_grad, learning-rate access for schedulers,
// and a flat, ordered state_dict ("state.3.exp_avg", "state.3.step", "param_groups.0.lr", as
// 0-d float64 tensors for numbers) that safetensors can hold. OptimizerWithOptions, between it
// and them, keeps each group's options struct.
// Leaves out: the update rules (nn/optim/sgd.cpp, adam.cpp) and closures (step(closure)).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/params.h"
#include "nn/clip.h"
#include "nn/state_dict.h"

namespace loom::distributed {
class ZeroOptimizer;
}

namespace loom::optim {

using nn::StateDict;

// Note [Optimizer state layout]
// Parameters are numbered across groups in order (group 0's first, then group 1's ...), as in
// PyTorch's state_dict. For parameter i that has state:
//   state.<i>.step       0-d float64, the number of updates applied (optimizers that count)
//   state.<i>.<buffer>   a tensor of the parameter's shape (exp_avg, momentum_buffer, ...)
// and for group g:
//   param_groups.<g>.params   1-d int64, the numbers of its parameters
//   param_groups.<g>.<name>   0-d float64, each hyper-parameter (lr, momentum, amsgrad as 0/1...)
// load_state_dict checks every name and shape and reports all problems in one error.

// Note [Capturable optimizer]
// A CUDA graph replays its kernels with the arguments they had at capture, so a captured step()
// cannot carry a learning rate or a step count that changes. make_capturable() prepares an
// optimizer whose step() can be captured (train/step_runner.cpp does, for --cuda-graph):
//  - each group's learning rate and step count move into float64 (1) tensors on its parameters'
//    device, which the fused kernels read and count (Note [Step scalars on the device] in
//    kernels/params.h); set_lr writes the device value (a tiny copy on the current stream, so it
//    lands before the next replay), state(i) and state_dict() read it back (a sync), and
//    load_state_dict writes it;
//  - every parameter's state is created now (zeros), because creating it inside the captured
//    step would replay the zero fill at every step.
// It requires fused updates, contiguous float32/float64 parameters on one device per group, and
// one step count per group; afterwards a group counts one step per step() and every parameter of
// the group must have a gradient at each step() (a fixed step replayed from a graph does).
// step_unless(flag) skips the update on the device, which is how GradScaler keeps the whole fp16
// step (unscale, inf check, update, scale schedule) free of host reads.

// Note [Clipping inside the update]
// clip_grad_norm_ scales every gradient in place by min(1, max_norm / (norm + 1e-6)) and the
// update then reads them again: one more read and write of all gradients (0.35 ms a step for
// GPT-2 124M on an H200). clip_grad_norm_in_step computes the norm and the coefficient (0-d, on
// the device: nothing is read back, so a CUDA graph can capture it) and, for an optimizer whose
// step() multiplies the gradients by it inside the update (fused Adam and AdamW:
// AdamStepParams::grad_scale; the composite Adam multiplies too), leaves the gradients as backward
// made them and hands the coefficient to the next step(). The parameters get the bits of the
// in-place clip followed by the update (on CUDA: the product is rounded once, never contracted;
// on the CPU to rounding). What is not as before: .grad stays unclipped. The coefficient is
// consumed by step() and dropped by zero_grad() (a step GradScaler skipped on the host never
// used it). Optimizers that cannot (SGD, sharded ones, gradients the fused norm does not take)
// clip in place as clip_grad_norm_.

// Per-parameter state. Buffers are created at the parameter's first update.
struct ParamState {
  int64_t step = 0;
  std::vector<Tensor>
      buffers;  // named by Optimizer::buffer_names(group); empty before the first update
  bool initialized() const { return !buffers.empty() || step > 0; }
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (parameters without one are skipped).
  virtual void step() = 0;
  // What step() does for `p` alone, a parameter of this optimizer with a gradient; the others are
  // left as they are even when they have one. OptimizerInBackward (nn/optim/in_backward.h) calls
  // it from each parameter's post-accumulate hook. Not for a capturable optimizer (its step count
  // is one per group and step()).
  void step_one(const Tensor& p);
  // Clears every parameter's gradient (undefined, as set_to_none=True).
  virtual void zero_grad();

  const std::string& name() const { return name_; }
  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  std::vector<Tensor> all_params() const;
  const ParamState& state(size_t param_index) const;

  // Learning rate of a group; set_lr(v) sets every group's (what schedulers call).
  double lr(size_t group = 0) const;
  void set_lr(size_t group, double lr);
  void set_lr(double lr);

  virtual StateDict state_dict() const;
  // Restores state and hyper-parameters saved by an optimizer of the same kind over parameters of
  // the same shapes (copied onto each parameter's device and dtype).
  virtual void load_state_dict(const StateDict& sd);

  // ---- sharded optimizers (ZeRO: distributed/zero/zero_optimizer.h) ----
  // An optimizer of the same kind, with each group's options, over `groups` (one list per group
  // of this one) and no state: how ZeRO builds the optimizer of its shard. Errors for a kind
  // that cannot (SGD, Adam and AdamW can).
  virtual std::unique_ptr<Optimizer> make_like(std::vector<std::vector<Tensor>> groups) const;
  // Whether this optimizer updates only this rank's share of the parameters; its gradients are
  // then that share's, and a sum over all gradients (GradScaler's inf flag, the clipping norm)
  // must be completed by sum_over_shards, which adds t up over the ranks (nothing here).
  virtual bool sharded() const { return false; }
  virtual void sum_over_shards(Tensor& t) const;

  // ---- a share of a split model (tensor parallel) ----
  // Note [Optimizing a share of a model]
  // Under tensor parallelism each rank's optimizer updates its share of a model: the split
  // weights' slices, and the whole parameters (norms, embeddings) that every rank holds alike. A
  // sum over the whole model's gradients (the clip's norm, the GradScaler's inf flag) must then
  // add up over the ranks, counting a whole parameter once: `counted(p)` says whether p's squares
  // count on this rank (a share: always; a whole parameter: on one rank), `sum(t)` adds t up over
  // the ranks. distributed::parallelize sets it; without it the optimizer's parameters are the
  // whole model.
  struct ModelShare {
    std::function<bool(const Tensor&)> counted;
    std::function<void(Tensor&)> sum;
  };
  void set_model_share(ModelShare share) { share_ = std::move(share); }
  // Clips the gradients step() will apply to a global 2-norm of max_norm and returns the norm
  // before clipping (nn::clip_grad_norm_ over the parameters; a sharded optimizer's over all
  // ranks). StepRunner's --grad-clip calls it.
  virtual Tensor clip_grad_norm_(double max_norm);
  // The same clip, applied by the next step() inside its update where this optimizer can (Note
  // [Clipping inside the update]); else clip_grad_norm_(max_norm). Returns the norm before
  // clipping. StepRunner's --grad-clip calls it.
  Tensor clip_grad_norm_in_step(double max_norm);

  // ---- a step that a CUDA graph can capture (Note [Capturable optimizer]) ----
  // Moves learning rates and step counts to the parameters' device and creates all state now.
  void make_capturable();
  bool capturable() const { return !device_lr_.empty(); }
  // step(), with the whole update skipped on the device where flag (float32 (1), e.g. the
  // GradScaler's found_inf) is nonzero. Only for a capturable optimizer.
  void step_unless(const Tensor& flag);

 protected:
  explicit Optimizer(std::string name) : name_(std::move(name)) {}
  // Checks and appends a group (leaf floating tensors, none already in another group).
  void add_group_params(std::vector<Tensor> params);

  // ---- what each optimizer describes ----
  // Hyper-parameters of a group, in a fixed order starting with "lr" (booleans as 0/1).
  virtual std::vector<std::pair<std::string, double>> hyper_parameters(size_t group) const = 0;
  virtual void set_hyper_parameter(size_t group, const std::string& name, double value) = 0;
  // Names of the per-parameter buffers in the group's state, in ParamState::buffers order.
  virtual std::vector<std::string> buffer_names(size_t group) const = 0;
  // Whether state.<i>.step is kept (Adam counts steps; SGD does not).
  virtual bool counts_steps() const = 0;
  // Whether the group's updates use the fused kernels (a capturable optimizer needs them).
  virtual bool fused(size_t group) const = 0;
  // Whether step() applies the coefficient of clip_grad_norm_in_step (take_grad_scale).
  virtual bool applies_grad_scale() const { return false; }
  // The share set by set_model_share (empty members when none): for a sharded optimizer's own
  // clip and sums.
  const ModelShare& model_share() const { return share_; }
  // For step(): the pending clip coefficient (undefined when none), which is cleared.
  Tensor take_grad_scale();

  // For the subclasses' step(): the group's device-side scalars, with the skip flag of the
  // current step_unless; undefined unless capturable.
  DeviceStepScalars device_scalars(size_t group) const;

  // The global number of group g's first parameter.
  size_t first_index(size_t group) const;
  const Tensor& param(size_t param_index) const;

  // The parameters of a group that have a gradient, bucketed for the fused kernels: one bucket
  // per (device, dtype, key(i)) in order of first appearance; a bucket is fusable when its
  // parameters are float32/float64 and contiguous. Checks each gradient against its parameter.
  struct StepBucket {
    std::vector<size_t> index;  // global parameter numbers
    bool fusable = false;
  };
  std::vector<StepBucket> buckets_with_grad(size_t group,
                                            const std::function<int64_t(size_t)>& key) const;
  ParamState& state_of(size_t param_index) { return state_[param_index]; }

 private:
  friend class distributed::ZeroOptimizer;  // forwards its hyper-parameters to the shard's
  // Capturable: copies the device step counts into state_ (a sync).
  void pull_device_steps() const;

  // load_state_dict's steps: sort the entries by parameter and group (an unknown or repeated key
  // is a problem), check each group's and each parameter's entries, then apply them.
  struct Loaded;
  Loaded sort_entries(const StateDict& sd, std::vector<std::string>& problems) const;
  void check_groups(const Loaded& l, std::vector<std::string>& problems) const;
  void check_param_states(const Loaded& l, std::vector<std::string>& problems) const;
  void apply(const Loaded& l);
  void refresh_capturable();  // after a load: complete state, device lr and step counts
  size_t group_of(size_t param_index) const;
  std::optional<nn::ClipCoefficient> split_clip(double max_norm) const;

  std::string name_;
  std::vector<std::vector<Tensor>> groups_;
  // By global parameter number. Mutable: a capturable optimizer's step counts are refreshed from
  // the device when read.
  mutable std::vector<ParamState> state_;
  std::vector<Tensor> device_lr_, device_step_;  // per group, when capturable
  Tensor skip_if_;                               // during step_unless
  Tensor grad_scale_;                 // from clip_grad_norm_in_step until step() or zero_grad()
  ModelShare share_;                  // set under tensor parallelism (else empty)
  const TensorImpl* only_ = nullptr;  // during step_one: the parameter updated
};

// An optimizer's hyper-parameters, listed once as a callable fields(options, f) that calls
// f(name, field) for each, in hyper_parameters' order: these two read and write them through it
// (a bool field as 0/1, set by value != 0). `who` names the optimizer in the error for an unknown
// name.
template <typename Options, typename Fields>
std::vector<std::pair<std::string, double>> hyper_parameter_values(const Options& o,
                                                                   const Fields& fields) {
  std::vector<std::pair<std::string, double>> out;
  fields(o, [&](const char* name, const auto& field) { out.emplace_back(name, double(field)); });
  return out;
}
template <typename Options, typename Fields>
void set_hyper_parameter_field(Options& o, const Fields& fields, const std::string& who,
                               const std::string& name, double value) {
  bool found = false;
  fields(o, [&](const char* n, auto& field) {
    if (found || name != n) return;
    found = true;
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, bool>)
      field = value != 0.0;
    else
      field = value;
  });
  LOOM_CHECK(found, who, ": no hyper-parameter \"", name, "\"");
}

// An optimizer whose groups each have an Options struct (SGDOptions, AdamOptions): it keeps them
// by group, reads and writes their hyper-parameters through Options::fields (the list of names
// and fields the two functions above take), and takes `fused` from them.
template <typename Options>
class OptimizerWithOptions : public Optimizer {
 public:
  // A group's options, to read or change between steps.
  Options& options(size_t group = 0) {
    params(group);  // checks the group's number
    return options_[group];
  }

 protected:
  using Optimizer::Optimizer;
  // Appends a group and its options (which the optimizer has checked).
  void add_group(std::vector<Tensor> params, const Options& options) {
    add_group_params(std::move(params));
    options_.push_back(options);
  }
  std::vector<std::pair<std::string, double>> hyper_parameters(size_t group) const override {
    return hyper_parameter_values(options_[group], Options::fields);
  }
  void set_hyper_parameter(size_t group, const std::string& name, double value) override {
    set_hyper_parameter_field(options_[group], Options::fields, this->name(), name, value);
  }
  bool fused(size_t group) const override { return options_[group].fused; }

  std::vector<Options> options_;  // by group
};

}  // namespace loom::optim
