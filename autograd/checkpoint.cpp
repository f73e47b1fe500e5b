// Activation checkpointing (Note [Activation checkpointing] in autograd/checkpoint.h): the
// forward under no-grad, and the "checkpoint" node whose backward recomputes and back-propagates
// the block. Leaves out: generators other than the default one (a block drawing from its own
// Generator is not replayed; the ops that take one say so).
#include "autograd/checkpoint.h"

#include <optional>

#include "autograd/amp/autocast.h"
#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "core/generator.h"

namespace loom::autograd {

namespace {

// The forward's context, put back for the recomputation.
struct Replay {
  GeneratorState rng;             // the default generator before the forward
  std::optional<DType> autocast;  // the autocast dtype of the forward
};

// fn on detached copies of `inputs` (those that required grad require it again) with grad mode
// on, in the forward's context; the default generator ends where it was.
std::pair<Tensor, std::vector<Tensor>> recompute(
    const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
    const std::vector<bool>& wants_grad, const Replay& replay) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor x = inputs[i].defined() ? inputs[i].detach() : Tensor();
    if (x.defined() && wants_grad[i]) x.requires_grad_(true);
    xs.push_back(x);
  }
  const GeneratorState after = default_generator().state();
  default_generator().set_state(replay.rng);
  Tensor y;
  {
    struct EnableGrad {  // grad mode on for the recomputation, restored however it ends
      bool prev = is_grad_enabled();
      EnableGrad() { set_grad_enabled(true); }
      ~EnableGrad() { set_grad_enabled(prev); }
    } on;
    amp::Autocast ac(replay.autocast);
    y = fn(xs);
  }
  default_generator().set_state(after);
  return {y, xs};
}

}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs) {
  // Nothing to recompute for when no input needs a gradient: then run the block as it is (its
  // parameters still get theirs through its own graph).
  if (!is_grad_enabled() || !any_requires_grad(inputs)) return fn(inputs);
  const Replay replay{default_generator().state(), amp::autocast_dtype()};
  Tensor out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  LOOM_CHECK(out.defined() && is_floating(out.dtype()),
             "checkpoint: the block must return a floating tensor, got ",
             out.defined() ? describe(out) : std::string("undefined"));
  std::vector<bool> wants_grad;
  std::vector<Saved> saved;
  for (const Tensor& x : inputs) {
    wants_grad.push_back(x.defined() && x.requires_grad());
    saved.push_back(x.defined() ? Saved(x, "checkpoint") : Saved());
  }
  return record("checkpoint", out, inputs, [fn, saved, wants_grad, replay](const Tensor& g) {
    std::vector<Tensor> ins;
    for (const Saved& s : saved) ins.push_back(s.defined() ? s.get() : Tensor());
    auto [y, xs] = recompute(fn, ins, wants_grad, replay);
    if (y.requires_grad()) backward_nested(y, g);
    Grads grads;
    for (const Tensor& x : xs)
      grads.push_back(x.defined() && x.requires_grad() ? x.grad() : Tensor());
    return grads;
  });
}

}  // namespace loom::autograd
