// The fused cross_entropy kernels (Note [Fused cross-entropy] in autograd/ops/softmax_loss.cpp: by
// default for 1024 classes or more) against the composite of log_softmax and nll_loss: losses and
// gradients for every reduction, with and without label smoothing, ignored rows, strided logits,
// float32 and float64; a vocabulary-sized row fused by default; bfloat16 logits read as they are
// under autocast (float32 loss) and outside it (the logits' dtype, as composed); one autograd
// node; Mean over no counted row is NaN in both. The op table
// (cases_softmax_loss.cpp) checks the composite against float64 references and finite differences,
// and CudaFusedCrossEntropy the GPU kernels against these CPU ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/amp/autocast.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "autograd/ops/softmax_loss.h"

using namespace loom;

namespace {

// Sets the path for a scope and puts the previous one back.
struct FusedScope {
  explicit FusedScope(bool on) : saved(fused_cross_entropy()) { set_fused_cross_entropy(on); }
  ~FusedScope() { set_fused_cross_entropy(saved); }
  bool saved;
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

struct Result {
  Tensor loss, grad;
};

Result run(const Tensor& logits0, const Tensor& target, Reduction r, double ls, int64_t ignore,
           bool transposed) {
  Tensor leaf = logits0.detach().clone().requires_grad_(true);
  Tensor logits = transposed ? leaf.t().contiguous().t() : leaf;  // strided (column-major)
  Tensor loss = cross_entropy(logits, target, r, ls, ignore);
  Tensor seed = r == Reduction::None
                    ? arange(0, double(target.size(0))).to(loss.dtype()) * 0.25 + 1.0
                    : ones_like(loss) * 1.5;
  loss.backward(seed);
  return {loss.detach(), leaf.grad()};
}

}  // namespace

TEST(FusedCrossEntropy, MatchesTheComposite) {
  EXPECT_FALSE(fused_cross_entropy()) << "the composite is the default";
  Generator gen(3);
  for (DType dt : {kF32, kF64}) {
    const double tol = dt == kF32 ? 2e-6 : 1e-13;
    Tensor logits = (randn({37, 11}, {.dtype = kF64}, &gen) * 3.0).to(dt);
    Tensor target = randint(0, 11, {37}, {.dtype = kI64}, &gen);
    target.data<int64_t>()[4] = -100;
    target.data<int64_t>()[20] = 7;  // 7 is also the ignore index of one case below
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (double ls : {0.0, 0.1})
        for (int64_t ignore : {int64_t(-100), int64_t(7)})
          for (bool transposed : {false, true}) {
            const std::string what = std::string(dtype_name(dt)) + " r=" + std::to_string(int(r)) +
                                     " ls=" + std::to_string(ls) +
                                     " ignore=" + std::to_string(ignore) +
                                     (transposed ? " strided" : "");
            if (ignore == 7) target.data<int64_t>()[4] = 2;  // -100 is then out of range
            Result fused, comp;
            {
              FusedScope f(true);
              fused = run(logits, target, r, ls, ignore, transposed);
            }
            {
              FusedScope c(false);
              comp = run(logits, target, r, ls, ignore, transposed);
            }
            if (ignore == 7) target.data<int64_t>()[4] = -100;
            ASSERT_EQ(fused.loss.shape(), comp.loss.shape()) << what;
            // relative to the largest value: sums of up to 37 rows, gradients up to about 10
            const double lscale = std::max(1.0, max(abs(comp.loss.to(kF64))).item());
            const double gscale = std::max(1.0, max(abs(comp.grad.to(kF64))).item());
            EXPECT_LT(max_abs_diff(fused.loss, comp.loss), tol * 10 * lscale) << what;
            EXPECT_LT(max_abs_diff(fused.grad, comp.grad), tol * gscale) << what;
          }
  }
}

TEST(FusedCrossEntropy, OneNodeAndNanWhenNoRowCounts) {
  FusedScope f(true);
  Tensor logits = randn({4, 3}).requires_grad_(true);
  Tensor target = from_vector<int64_t>({1, 0, 2, 1}, {4});
  Tensor loss = cross_entropy(logits, target);
  ASSERT_TRUE(loss.grad_fn());
  EXPECT_EQ(std::string(loss.grad_fn()->name), "cross_entropy");
  Tensor none = full({4}, -100, {.dtype = kI64});
  EXPECT_TRUE(std::isnan(cross_entropy(logits.detach(), none).item()));
  loss.backward();
  // Each row's gradient sums to zero (softmax minus a one-hot, both summing to one).
  EXPECT_LT(max(abs(sum(logits.grad(), {1}))).item(), 1e-6);
}

// 1500 classes: fused without being asked, and equal to nll_loss(log_softmax(x)) in float64.
TEST(FusedCrossEntropy, ManyClassesAreFusedByDefault) {
  ASSERT_FALSE(fused_cross_entropy());
  Generator gen(5);
  Tensor x = (randn({9, 1500}, {.dtype = kF64}, &gen) * 2.0).requires_grad_(true);
  Tensor target = randint(0, 1500, {9}, {.dtype = kI64}, &gen);
  target.data<int64_t>()[3] = -100;
  Tensor loss = cross_entropy(x, target);
  ASSERT_TRUE(loss.grad_fn());
  EXPECT_EQ(std::string(loss.grad_fn()->name), "cross_entropy") << "fused: one node";
  loss.backward();
  Tensor x2 = x.detach().clone().requires_grad_(true);
  Tensor want = nll_loss(log_softmax(x2, 1), target);
  want.backward();
  EXPECT_NEAR(loss.item(), want.item(), 1e-12);
  EXPECT_LT(max_abs_diff(x.grad(), x2.grad()), 1e-15);
}

// bfloat16 logits of a language model: under autocast the fused op reads them as they are and
// returns a float32 loss (the composite would copy them to float32 first); the gradient is
// bfloat16. The reference is the float64 composite on the same (bfloat16-rounded) values.
TEST(FusedCrossEntropy, BFloat16LogitsUnderAutocast) {
  Generator gen(6);
  Tensor x64 = (randn({12, 1100}, {.dtype = kF64}, &gen) * 3.0).to(kBF16).to(kF64);
  Tensor target = randint(0, 1100, {12}, {.dtype = kI64}, &gen);
  Tensor xb = x64.to(kBF16).requires_grad_(true);
  Tensor loss;
  {
    amp::Autocast ac(kBF16);
    loss = cross_entropy(xb, target);
  }
  EXPECT_EQ(loss.dtype(), kF32);
  loss.backward();
  ASSERT_EQ(xb.grad().dtype(), kBF16);
  Tensor xr = x64.clone().requires_grad_(true);
  Tensor want = nll_loss(log_softmax(xr, 1), target);
  want.backward();
  EXPECT_NEAR(loss.item(), want.item(), 1e-5 * std::abs(want.item()));
  // bfloat16 keeps 8 bits: each gradient within 2^-8 of its size, plus float32 noise
  Tensor err = abs(xb.grad().to(kF64) - xr.grad());
  EXPECT_LT(max(err - abs(xr.grad()) * (1.0 / 256)).item(), 1e-7);
  // Outside autocast the loss keeps the logits' dtype, as the composite's does.
  EXPECT_EQ(cross_entropy(xb.detach(), target).dtype(), kBF16);
}

// With nothing else holding the logits and the graph freed after backward, the gradient is written
// over the logits (Note [Fused cross-entropy]): the weights' gradient is still the composite's;
// logits the caller holds keep their values; with retain_graph a second backward sees the same
// logits (the gradient doubles).
TEST(FusedCrossEntropy, GradientOverTheLogitsKeepsEveryValueRight) {
  Generator gen(8);
  Tensor x = randn({5, 6}, {.dtype = kF64}, &gen), t = randint(0, 1500, {5}, {.dtype = kI64}, &gen);
  Tensor w0 = randn({6, 1500}, {.dtype = kF64}, &gen);
  auto leaf = [&] { return w0.clone().requires_grad_(true); };
  Tensor w = leaf(), wc = leaf();
  Tensor l = cross_entropy(mm(x, w), t);  // the logits are dropped: backward reuses them
  l.backward();
  nll_loss(log_softmax(mm(x, wc), 1), t).backward();
  EXPECT_LT(max_abs_diff(w.grad(), wc.grad()), 1e-14);
  Tensor wh = leaf();
  Tensor held = mm(x, wh), copy = held.detach().clone();
  cross_entropy(held, t).backward();
  EXPECT_EQ(max_abs_diff(held, copy), 0.0) << "logits the caller holds are not overwritten";
  EXPECT_LT(max_abs_diff(wh.grad(), wc.grad()), 1e-14);
  Tensor wr = leaf();
  Tensor loss = cross_entropy(mm(x, wr), t);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  EXPECT_LT(max_abs_diff(wr.grad(), wc.grad() * 2.0), 1e-14);
}
