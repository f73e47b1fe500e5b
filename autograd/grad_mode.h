// Grad mode: a thread-local switch that turns graph recording off (NoGradGuard), as in
// torch.no_grad(). Optimizer steps, evaluation and the backward pass itself run with it off.
// Leaves out: inference mode (no version counters at all); loom always counts versions.
#pragma once

namespace loom::autograd {

bool is_grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace loom::autograd

namespace loom {
using autograd::NoGradGuard;
}
