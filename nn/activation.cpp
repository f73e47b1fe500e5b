// ReLU and GELU modules: parameterless wrappers around loom::relu and loom::gelu.
// Leaves out: in-place variants and the tanh approximation of GELU.
#include "autograd/ops/elementwise.h"
#include "nn/layers.h"

namespace loom::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }

}  // namespace loom::nn
