// Dropout module: loom::dropout in training, the identity in eval.
// Leaves out: Dropout2d (whole channels) and alpha dropout.
#include "autograd/ops/dropout.h"

#include "nn/layers.h"

namespace loom::nn {

Dropout::Dropout(double p_) : Module("Dropout"), p(p_) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability ", p, " is not in [0, 1]");
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return str("p=", p); }

}  // namespace loom::nn
