// Linear: y = x W^T + b through loom::linear (loom::fp8_linear once nn::convert_to_fp8 has marked
// it), with PyTorch's default initialisation.
// Leaves out: factory options for dtype and device (use Module::to after construction).
#include <cmath>

#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/fp8_linear.h"
#include "autograd/ops/linalg.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/lora.h"

namespace loom::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias)
    : Module("Linear"), in_features(in), out_features(out) {
  LOOM_CHECK(in > 0 && out > 0, "Linear: in_features (", in, ") and out_features (", out,
             ") must be positive");
  weight = init::new_parameter({out, in});
  register_parameter("weight", weight);
  if (has_bias) {
    bias = init::new_parameter({out});
    register_parameter("bias", bias);
  }
  reset_parameters();
}

Linear::Linear(std::string type_name, Tensor w, Tensor b)
    : Module(std::move(type_name)),
      in_features(w.dim() == 2 ? w.size(1) : 0),
      out_features(w.dim() == 2 ? w.size(0) : 0) {
  LOOM_CHECK(w.dim() == 2 && (!b.defined() || (b.dim() == 1 && b.size(0) == out_features)),
             this->type_name(), ": weight ", describe(w), " must be (out, in) and bias ",
             b.defined() ? describe(b) : std::string("undefined"), " (out)");
  weight = std::move(w);
  register_parameter("weight", weight);
  if (b.defined()) {
    bias = std::move(b);
    register_parameter("bias", bias);
  }
}

void Linear::reset_parameters() {
  // Note [PyTorch's default init]: kaiming_uniform_ with a = sqrt(5) gives gain sqrt(1/3), so
  // bound = sqrt(1/3) * sqrt(3 / fan_in) = 1 / sqrt(fan_in); the bias uses the same bound.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(double(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) { return forward(x, LinearActivation::None); }

namespace {

// act(fp8_linear(x)): the FP8 product has no activation epilogue, so the activation is its own op.
Tensor fp8_forward(const Linear& l, const Tensor& x, LinearActivation act) {
  Tensor y = fp8_linear(x, l.weight, l.bias);
  if (act == LinearActivation::Relu) return relu(y);
  if (act == LinearActivation::GeluTanh) return gelu_tanh(y);
  return y;
}

}  // namespace

Tensor Linear::forward(const Tensor& x, LinearActivation act) {
  LOOM_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_features,
             "Linear(in_features=", in_features, "): input ",
             x.defined() ? describe(x) : std::string("undefined"), " should end in ", in_features,
             " features");
  if (!lora_A) return fp8 ? fp8_forward(*this, x, act) : linear(x, weight, bias, act);
  LOOM_CHECK(act == LinearActivation::None, "Linear(in_features=", in_features,
             "): low-rank adapters add after the product, so a fused activation cannot follow; "
             "apply LoRA to the plain model (before nn::fuse)");
  // Note [LoRA] in nn/lora.h
  return (fp8 ? fp8_linear(x, weight, bias) : linear(x, weight, bias)) + lora_delta(*this, x);
}

std::string Linear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features,
             ", bias=", bias.defined() ? "true" : "false",
             lora_A ? str(", lora_rank=", lora_A->out_features, ", lora_scale=", lora_scale) : "",
             fp8 ? ", fp8=tensorwise" : "");
}

}  // namespace loom::nn
