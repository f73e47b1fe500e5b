// Recompute and the switch of Note [Recomputed activations] (autograd/recompute.h).
#include "autograd/recompute.h"

#include <atomic>

#include "autograd/function.h"
#include "autograd/grad_mode.h"

namespace loom::autograd {

namespace {
std::atomic<bool> g_recompute{false};
}  // namespace

bool recompute_activations() { return g_recompute.load(std::memory_order_relaxed); }
void set_recompute_activations(bool on) { g_recompute.store(on, std::memory_order_relaxed); }

Recompute::Recompute(const char* op, std::function<Tensor()> fn, const Tensor& out)
    : op_(op),
      fn_(std::move(fn)),
      sizes_(out.shape()),
      strides_(out.strides()),
      offset_(out.offset()),
      dtype_(out.dtype()),
      version_(out.version()) {}

Tensor Recompute::materialize() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.defined()) return cache_;
  Tensor t;
  {
    NoGradGuard no_grad;
    t = fn_();
  }
  // The saved views are re-made over the new storage with their old geometry, so the rebuilt
  // output must be laid out as the original was.
  LOOM_CHECK(t.shape() == sizes_ && t.strides() == strides_ && t.offset() == offset_ &&
                 t.dtype() == dtype_,
             op_, ": the recomputed output ", describe(t), " (strides ", t.strides(), ", offset ",
             t.offset(), ") is not laid out as the forward's (", sizes_, ", strides ", strides_,
             ", offset ", offset_, ", ", dtype_name(dtype_), ") (Note [Recomputed activations])");
  cache_ = t;
  return cache_;
}

void Recompute::add_user() {
  std::lock_guard<std::mutex> lock(mu_);
  ++users_;
}

void Recompute::drop_user() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--users_ == 0) cache_ = Tensor();  // the last Saved is gone: so is the rebuilt output
}

RecomputeUse::RecomputeUse(std::shared_ptr<Recompute> r, const Tensor& t)
    : recipe(std::move(r)), sizes(t.shape()), strides(t.strides()), offset(t.offset()) {
  recipe->add_user();
}

RecomputeUse::~RecomputeUse() {
  view = Tensor();
  recipe->drop_user();
}

void offer_recompute(const char* op, const Tensor& out, const std::vector<Tensor>& inputs,
                     std::function<Tensor()> fn) {
  if (!recompute_activations() || !out.defined() || !any_requires_grad(inputs)) return;
  out.storage()->recompute = std::make_shared<Recompute>(op, std::move(fn), out);
}

std::shared_ptr<Recompute> recipe_of(const Tensor& t) {
  const std::shared_ptr<Recompute>& r = t.storage()->recompute;
  if (!r || r->version() != t.version() || r->dtype() != t.dtype()) return nullptr;
  return r;
}

}  // namespace loom::autograd
