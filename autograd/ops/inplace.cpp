// In-place methods. They are never recorded: on a tensor that requires grad they are allowed
// only with grad mode off (optimizer updates, initialisation), and every one bumps the version
// counter so that a backward that saved the old values raises an error instead of using new ones.
#include "autograd/grad_mode.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace loom {

namespace {
void check_inplace(const char* op, const Tensor& t) {
  detail::check_defined(op, t, "self");
  LOOM_CHECK(!t.requires_grad() || !autograd::is_grad_enabled(), op, ": ", describe(t),
             t.is_leaf() ? " is a leaf that requires grad" : " is part of an autograd graph",
             "; in-place ops on it are allowed only under NoGradGuard");
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double v) {
  check_inplace("fill_", *this);
  backend_for(device()).fill_(*this, v);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace("copy_", *this);
  detail::check_defined("copy_", src, "source");
  broadcast_shapes("copy_", src.shape(), shape());
  LOOM_CHECK(broadcast_shapes("copy_", src.shape(), shape()) == shape(), "copy_: source ",
             describe(src), " does not broadcast to ", describe(*this));
  backend_for(device().is_cpu() ? src.device() : device()).copy_(*this, src);
  bump_version();
  return *this;
}

namespace {
Tensor& binary_inplace(const char* op, BinaryOp bop, Tensor& self, const Tensor& o) {
  check_inplace(op, self);
  detail::check_pair(op, self, o);
  LOOM_CHECK(broadcast_shapes(op, o.shape(), self.shape()) == self.shape(), op, ": ", describe(o),
             " does not broadcast to ", describe(self));
  backend_for(self.device()).binary_(bop, self, o);
  self.bump_version();
  return self;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& o, double alpha) {
  if (alpha == 1.0) return binary_inplace("add_", BinaryOp::Add, *this, o);
  NoGradGuard g;
  return binary_inplace("add_", BinaryOp::Add, *this, o * alpha);
}

Tensor& Tensor::sub_(const Tensor& o) { return binary_inplace("sub_", BinaryOp::Sub, *this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return binary_inplace("mul_", BinaryOp::Mul, *this, o); }

Tensor& Tensor::mul_(double s) {
  check_inplace("mul_", *this);
  Tensor sc = full({}, s, {.dtype = dtype(), .device = device()});
  return binary_inplace("mul_", BinaryOp::Mul, *this, sc);
}

Tensor& Tensor::div_(double s) { return mul_(1.0 / s); }

Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& src) {
  check_inplace("index_copy_", *this);
  detail::check_defined("index_copy_", src, "source");
  detail::check_defined("index_copy_", index, "index");
  LOOM_CHECK(src.dtype() == dtype() && src.device() == device() && index.device() == device(),
             "index_copy_: ", describe(*this), ", its index ", describe(index), " and source ",
             describe(src), " must share the device (and the source its dtype)");
  LOOM_CHECK(is_contiguous(), "index_copy_: ", describe(*this), " must be contiguous");
  backend_for(device()).index_copy_(*this, dim, index, src);
  bump_version();
  return *this;
}

}  // namespace loom
