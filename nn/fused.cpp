// The fused modules: each lists its first layer's tensors as its own (Note [Fused modules keep
// the unfused keys] in nn/fused.h), runs one fused op, and runs its original layers one by one in
// anomaly mode.
// Leaves out: which runs of layers get fused (nn/fuse.cpp) and the fused ops themselves
// (autograd/ops/linalg.cpp, autograd/ops/norm.cpp).
#include "nn/fused.h"

#include <sstream>

#include "autograd/anomaly.h"

namespace loom::nn {

FusedModule::FusedModule(std::string type_name, std::vector<std::shared_ptr<Module>> parts)
    : Module(std::move(type_name)), parts_(std::move(parts)) {
  LOOM_CHECK(!parts_.empty(), this->type_name(), ": a fused module needs the layers it replaces");
  for (size_t i = 0; i < parts_.size(); ++i)
    LOOM_CHECK(parts_[i] != nullptr, this->type_name(), ": layer ", i, " of ", parts_.size(),
               " is null");
  share_members_of(*parts_[0]);
  Module::train(parts_[0]->is_training());
}

void FusedModule::train(bool on) {
  Module::train(on);
  for (const auto& p : parts_) p->train(on);
}

std::string FusedModule::extra_repr() const {
  std::ostringstream os;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (i) os << ", ";
    parts_[i]->print(os);
  }
  return os.str();
}

Tensor FusedModule::composite(const Tensor& x) {
  Tensor h = x;
  for (const auto& p : parts_) h = (*p)(h);
  return h;
}

// ---------------------------------------------------------------- LinearReLU

LinearReLU::LinearReLU(std::shared_ptr<Linear> l, std::shared_ptr<ReLU> relu)
    : FusedModule("LinearReLU", {l, relu}), linear(std::move(l)) {}

Tensor LinearReLU::forward(const Tensor& x) {
  if (autograd::is_anomaly_enabled()) return composite(x);
  return linear->forward(x, LinearActivation::Relu);
}

// ---------------------------------------------------------------- BatchNormReLU2d

BatchNormReLU2d::BatchNormReLU2d(std::shared_ptr<BatchNorm2d> b, std::shared_ptr<ReLU> relu)
    : FusedModule("BatchNormReLU2d", {b, relu}), bn(std::move(b)) {}

Tensor BatchNormReLU2d::forward(const Tensor& x) {
  if (autograd::is_anomaly_enabled()) return composite(x);
  return bn->forward(x, /*relu=*/true);
}

// ---------------------------------------------------------------- BatchNormReLUMaxPool2d

bool is_max_pool_2(const MaxPool2d& pool) {
  const IntPair k = pool.kernel_size, s = *pool.options.stride, p = pool.options.padding;
  return k == IntPair(2) && s == IntPair(2) && p == IntPair(0);
}

BatchNormReLUMaxPool2d::BatchNormReLUMaxPool2d(std::shared_ptr<BatchNorm2d> b,
                                               std::shared_ptr<ReLU> relu,
                                               std::shared_ptr<MaxPool2d> pool)
    : FusedModule("BatchNormReLUMaxPool2d", {b, relu, pool}), bn(std::move(b)) {
  LOOM_CHECK(is_max_pool_2(*pool),
             "BatchNormReLUMaxPool2d: the pooling must be MaxPool2d(2) (2 x 2 "
             "window, stride 2, no padding), got MaxPool2d(",
             pool->extra_repr(), ")");
}

Tensor BatchNormReLUMaxPool2d::forward(const Tensor& x) {
  if (autograd::is_anomaly_enabled()) return composite(x);
  return bn->forward(x, /*relu=*/true, /*max_pool2=*/true);
}

}  // namespace loom::nn
