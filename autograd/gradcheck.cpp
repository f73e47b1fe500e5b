// Finite-difference gradient check.
#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/ops/ops.h"

namespace loom::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps, double atol, double rtol) {
  for (const Tensor& x : inputs) {
    if (!x.defined() || !x.requires_grad()) continue;
    LOOM_CHECK(x.dtype() == DType::F64 && x.device().is_cpu() && x.is_leaf() && x.is_contiguous(),
               "gradcheck: inputs that require grad must be contiguous float64 CPU leaves, got ",
               describe(x));
  }
  // Fixed weights turn the output into a scalar: L = sum(w * f(x)).
  Tensor out0;
  {
    NoGradGuard g;
    out0 = f(inputs);
  }
  Generator gen(1234);
  Tensor w = randn(out0.shape(), {.dtype = DType::F64}, &gen);
  auto loss = [&]() {
    NoGradGuard g;
    return sum(f(inputs) * w).item();
  };

  // Analytic gradients.
  std::vector<Tensor> leaves;
  for (const Tensor& x : inputs) {
    if (x.defined() && x.requires_grad()) {
      const_cast<Tensor&>(x).set_grad(Tensor());
      leaves.push_back(x);
    }
  }
  Tensor L = sum(f(inputs) * w);
  L.backward();

  GradcheckResult r;
  for (size_t k = 0; k < leaves.size(); ++k) {
    const Tensor& x = leaves[k];
    Tensor gx = x.grad();
    std::vector<double> analytic =
        gx.defined() ? gx.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* p = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = p[i];
      p[i] = orig + eps;
      double up = loss();
      p[i] = orig - eps;
      double down = loss();
      p[i] = orig;
      double numeric = (up - down) / (2 * eps);
      double err = std::fabs(analytic[i] - numeric);
      if (!(err <= atol + rtol * std::fabs(numeric))) {
        std::ostringstream os;
        os << "gradient mismatch for input " << k << " " << describe(x) << " at flat element " << i
           << ": analytic " << analytic[i] << ", numeric " << numeric << " (error " << err << ")";
        r.ok = false;
        r.message = os.str();
        return r;
      }
    }
  }
  return r;
}

}  // namespace loom::autograd
