// fit_curve: fit y = sin(3x) on [-1, 1] with a two-layer MLP (1 -> 64 -> 1, tanh), using only
// tensors, autograd and a hand-written SGD step. The smallest complete training loop in loom.
//
//   ./build/examples/fit_curve            # prints the loss every 100 steps
#include <cmath>
#include <cstdio>
#include <vector>

#include "autograd/ops/ops.h"

using namespace loom;

namespace {

int fit() {
  manual_seed(0);
  const int64_t n = 256, hidden = 64;
  // Data: x in [-1, 1], y = sin(3x). Shapes: x (n, 1), y (n, 1).
  std::vector<float> xs(n), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    xs[i] = -1.0f + 2.0f * float(i) / float(n - 1);
    ys[i] = std::sin(3.0f * xs[i]);
  }
  Tensor x = from_vector(xs, {n, 1}), y = from_vector(ys, {n, 1});

  // Parameters, scaled like PyTorch's default init (uniform in +-1/sqrt(fan_in)).
  Tensor w1 = uniform({1, hidden}, -1.0, 1.0, {.requires_grad = true});
  Tensor b1 = uniform({hidden}, -1.0, 1.0, {.requires_grad = true});
  double bound = 1.0 / std::sqrt(double(hidden));
  Tensor w2 = uniform({hidden, 1}, -bound, bound, {.requires_grad = true});
  Tensor b2 = uniform({1}, -bound, bound, {.requires_grad = true});

  const double lr = 0.1;
  for (int step = 0; step <= 2000; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);  // (n, hidden)
    Tensor pred = matmul(h, w2) + b2;     // (n, 1)
    Tensor loss = mean(square(pred - y));
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the graph
      for (Tensor* p : {&w1, &b1, &w2, &b2}) {
        p->sub_(p->grad() * lr);
        p->set_grad(Tensor());
      }
    }
    if (step % 200 == 0) std::printf("step %4d  loss %.6f\n", step, loss.item());
  }
  return 0;
}

}  // namespace

int main() {
  try {
    return fit();
  } catch (const std::exception& e) {  // loom::Error and anything else: one line, exit code 1
    std::fprintf(stderr, "fit_curve: error: %s\n", e.what());
    return 1;
  }
}
