// Loss modules: argument checks that name the module, then the op.
// Leaves out: the math (autograd/ops, softmax_loss.cpp).
#include "nn/loss.h"

namespace loom::nn {

namespace {
const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
  }
  return "?";
}
}  // namespace

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyLossOptions opt)
    : Module("CrossEntropyLoss"), options(opt) {
  LOOM_CHECK(opt.label_smoothing >= 0.0 && opt.label_smoothing < 1.0,
             "CrossEntropyLoss: label_smoothing ", opt.label_smoothing, " is not in [0, 1)");
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) const {
  return cross_entropy(input, target, options.reduction, options.label_smoothing,
                       options.ignore_index);
}

std::string CrossEntropyLoss::extra_repr() const {
  return str("reduction=", reduction_name(options.reduction),
             ", label_smoothing=", options.label_smoothing);
}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) const {
  return nll_loss(input, target, options.reduction, options.ignore_index);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) const {
  LOOM_CHECK(input.defined() && target.defined() && input.shape() == target.shape(),
             "MSELoss: input ", input.defined() ? describe(input) : "undefined", " and target ",
             target.defined() ? describe(target) : "undefined", " must have one shape");
  return mse_loss(input, target, reduction);
}

}  // namespace loom::nn
