// OptimizerInBackward (nn/optim/in_backward.h).
#include "nn/optim/in_backward.h"

#include <mutex>
#include <set>

#include "autograd/engine.h"
#include "core/error.h"

namespace loom::optim {

namespace {
// The optimizers that have an active OptimizerInBackward.
std::mutex g_mutex;
std::set<const Optimizer*>& attached() {
  static std::set<const Optimizer*> s;
  return s;
}
}  // namespace

struct OptimizerInBackward::State {
  Optimizer* opt = nullptr;
  bool active = true;
  int64_t updates = 0;
};

OptimizerInBackward::OptimizerInBackward(Optimizer& opt) : state_(std::make_shared<State>()) {
  LOOM_CHECK(!opt.capturable(), "OptimizerInBackward: ", opt.name(),
             " is capturable (a CUDA graph step); it cannot update one parameter at a time");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    LOOM_CHECK(attached().insert(&opt).second, "OptimizerInBackward: ", opt.name(),
               " already runs inside backward (a second OptimizerInBackward would update every "
               "parameter twice)");
  }
  state_->opt = &opt;
  for (const Tensor& p : opt.all_params())
    autograd::register_post_accumulate_grad_hook(p, [st = state_](const Tensor& leaf) {
      if (!st->active) return;
      st->opt->step_one(leaf);
      Tensor q = leaf;
      q.set_grad(Tensor());  // consumed: its memory goes back for the next layers' gradients
      ++st->updates;
    });
}

OptimizerInBackward::~OptimizerInBackward() {
  state_->active = false;
  std::lock_guard<std::mutex> lock(g_mutex);
  attached().erase(state_->opt);
}

int64_t OptimizerInBackward::updates() const { return state_->updates; }

}  // namespace loom::optim
