// gradcheck: compares the gradients autograd computes with central finite differences in
// float64, as torch.autograd.gradcheck does. The output is reduced to a scalar with fixed random
// weights (so every output element's gradient is exercised), then each input element is nudged
// by +-eps.
// Leaves out: second derivatives (loom has no double backward).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
};

// f maps the inputs to one output. Inputs must be float64 CPU leaves; those with requires_grad
// are checked. An element passes if |analytic - numeric| <= atol + rtol * |numeric|.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                          double rtol = 1e-4);

}  // namespace loom::autograd
