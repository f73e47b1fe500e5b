// The parts of a bucket reduction every kind may share: the gradients as views into the buckets
// (Note [Gradients as bucket views]) and the wait. See distributed/ddp/bucket_reduction.h.
#include "distributed/ddp/bucket_reduction.h"

#include "autograd/grad_mode.h"

namespace loom::distributed {

namespace {
bool same_memory(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape();
}
}  // namespace

void BucketReduction::bind_grads(std::vector<Bucket>& buckets, std::vector<Tensor>& params) {
  autograd::NoGradGuard no_grad;
  for (Bucket& b : buckets) {
    std::vector<size_t> to_zero;
    for (size_t k = 0; k < b.params.size(); ++k) {
      Tensor& p = params[b.params[k]];
      Tensor g = p.grad();
      if (!g.defined()) {
        to_zero.push_back(k);
      } else if (!same_memory(g, b.views[k])) {
        b.views[k].copy_(g);
        p.set_grad(b.views[k]);
      }
    }
    if (to_zero.size() == b.params.size())
      b.flat.zero_();
    else
      for (size_t k : to_zero) b.views[k].zero_();
    for (size_t k : to_zero) params[b.params[k]].set_grad(b.views[k]);
  }
}

void BucketReduction::take_grad(Bucket& b, size_t k, std::vector<Tensor>& params) {
  Tensor& p = params[b.params[k]];
  Tensor view = b.views[k];
  Tensor g = p.grad();
  autograd::NoGradGuard no_grad;
  if (!g.defined()) {
    view.zero_();
    p.set_grad(view);
  } else if (!same_memory(g, view)) {
    view.copy_(g);
    p.set_grad(view);
  }
}

void BucketReduction::wait(Bucket& b) {
  if (!b.work) return;
  b.work->wait();
  b.work.reset();
}

}  // namespace loom::distributed
