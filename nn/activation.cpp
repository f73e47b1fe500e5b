// ReLU and GELU modules: parameterless wrappers around loom::relu and loom::gelu (or
// loom::gelu_tanh for GELU("tanh")).
// Leaves out: in-place variants.
#include <utility>

#include "autograd/ops/elementwise.h"
#include "nn/layers.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

GELU::GELU(std::string approximate_) : Module("GELU"), approximate(std::move(approximate_)) {
  LOOM_CHECK(approximate == "none" || approximate == "tanh", "GELU: approximate is '", approximate,
             "', expected 'none' (the erf form) or 'tanh'");
}

Tensor GELU::forward(const Tensor& x) { return approximate == "tanh" ? gelu_tanh(x) : gelu(x); }

std::string GELU::extra_repr() const { return str("approximate='", approximate, "'"); }

}  // namespace loom::nn
