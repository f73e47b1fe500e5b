// Sequential (children run in order, named "0", "1", ...) and Flatten, the glue between a CNN's
// feature extractor and its classifier.
// Leaves out: ModuleList/ModuleDict (a Sequential or named members cover loom's models).
#include "autograd/anomaly.h"
#include "autograd/ops/shape.h"
#include "nn/layers.h"

namespace loom::nn {

Flatten::Flatten(int64_t s, int64_t e) : Module("Flatten"), start_dim(s), end_dim(e) {}

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const {
  return str("start_dim=", start_dim, ", end_dim=", end_dim);
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
    : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(size()), std::move(m));
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  LOOM_CHECK(i < size(), "Sequential: index ", i, " is out of range for ", size(), " modules");
  return named_children()[i].second;
}

// Note [Linear + ReLU in Sequential]
// A Linear child followed by a ReLU child runs as Linear::forward(h, Relu): one fused op (on CUDA
// one cuBLASLt GEMM with bias and ReLU in its epilogue) instead of two, with the same result and
// gradients. Likewise BatchNorm2d followed by ReLU runs as BatchNorm2d::forward(h, true): the
// ReLU in batch norm's normalising pass and its mask in the backward kernels' reads (two
// passes over the activation fewer each way). A BatchNorm2d, a ReLU and a MaxPool2d(2) (kernel 2,
// stride 2, no padding) run as one op, batch_norm_relu_max_pool2d (Note [Batch norm into max pool]
// in kernels/cuda/cuda_norm_pool.cu: on CUDA the full-size activation is never written). Anomaly
// mode keeps them apart, so a NaN is still reported against the module that made it.
namespace {
// A MaxPool2d with a 2 x 2 window, stride 2 and no padding.
bool is_max_pool_2(const Module* m) {
  auto* pool = dynamic_cast<const MaxPool2d*>(m);
  if (!pool) return false;
  const IntPair k = pool->kernel_size, s = *pool->options.stride, p = pool->options.padding;
  return k.h == 2 && k.w == 2 && s.h == 2 && s.w == 2 && p.h == 0 && p.w == 0;
}
}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  const bool fuse = !autograd::is_anomaly_enabled();
  Tensor h = x;
  for (size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    if (fuse && i + 1 < children.size()) {
      const bool relu_next = dynamic_cast<ReLU*>(children[i + 1].second.get()) != nullptr;
      if (auto* lin = dynamic_cast<Linear*>(&m); lin && relu_next) {
        h = lin->forward(h, LinearActivation::Relu);
        ++i;
        continue;
      }
      if (auto* bn = dynamic_cast<BatchNorm2d*>(&m); bn && relu_next) {
        const bool pool_next =
            i + 2 < children.size() && is_max_pool_2(children[i + 2].second.get());
        h = bn->forward(h, true, pool_next);
        i += pool_next ? 2 : 1;
        continue;
      }
    }
    h = m(h);
  }
  return h;
}

}  // namespace loom::nn
