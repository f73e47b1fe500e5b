// Loss modules (CrossEntropyLoss, NLLLoss, MSELoss) around loom::cross_entropy, nll_loss and
// mse_loss, and the functional names in loom::nn::functional, as in torch.nn. A loss holds only
// its options: calling it is const (a const loss, or one shared by threads, can be called).
// Leaves out: class weights, BCE/Huber losses.
#pragma once

#include "autograd/ops/attention.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/embedding.h"
#include "autograd/ops/linalg.h"
#include "autograd/ops/softmax_loss.h"
#include "nn/module.h"

namespace loom::nn {

struct CrossEntropyLossOptions {
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;  // in [0, 1)
  int64_t ignore_index = -100;
};

// input: (N, C) logits, target: (N) int64 classes -> 0-d (Mean, Sum) or (N) (None).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {});
  // Module's one-input forward(x) stays visible beside the loss's own, and fails naming the
  // loss: said here, not hidden by accident (clang's -Woverloaded-virtual).
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target) const;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }
  std::string extra_repr() const override;

  CrossEntropyLossOptions options;
};

struct NLLLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
};

// input: (N, C) log-probabilities, target: (N) int64 classes.
class NLLLoss : public Module {
 public:
  explicit NLLLoss(NLLLossOptions options = {}) : Module("NLLLoss"), options(options) {}
  using Module::forward;  // as in CrossEntropyLoss
  Tensor forward(const Tensor& input, const Tensor& target) const;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }

  NLLLossOptions options;
};

// mean (or sum, or none) of (input - target)^2; both of one shape.
class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean)
      : Module("MSELoss"), reduction(reduction) {}
  using Module::forward;  // as in CrossEntropyLoss
  Tensor forward(const Tensor& input, const Tensor& target) const;
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return forward(input, target);
  }

  Reduction reduction;
};

// torch.nn.functional's names for the same ops.
namespace functional {
using loom::cross_entropy;
using loom::dropout;
using loom::embedding;
using loom::gelu;
using loom::gelu_tanh;
using loom::linear;
using loom::log_softmax;
using loom::mse_loss;
using loom::nll_loss;
using loom::relu;
using loom::scaled_dot_product_attention;
using loom::softmax;
}  // namespace functional

}  // namespace loom::nn
