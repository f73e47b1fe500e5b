// The fused 2-norm of clip_grad_norm_ (Note [Fused gradient norm] in kernels/backend_methods.inc)
// against clip_grad_norm_composite: the total and the clipped gradients in float64 and float32,
// with many tensors of odd sizes (several chunks, a tensor of one element), below and above the
// threshold; the sum of squares is the same bits run after run; bad lists give errors naming
// the op and the tensor. (CUDA against the CPU: CudaGradNorm.MatchesCpu.) The clip inside Adam's
// update (Note [Clipping inside the update]) against the clip followed by the update.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "nn/clip.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"

using namespace loom;

namespace {

// Parameters of sizes 1, 7, 9000 (two CUDA chunks), 33 x 65 and 20000, with gradients.
std::vector<Tensor> params_with_grads(DType dt, double grad_scale, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps;
  for (Shape s : {Shape{1}, Shape{7}, Shape{9000}, Shape{33, 65}, Shape{20000}}) {
    Tensor p = randn(s, {.dtype = dt}, &gen).requires_grad_(true);
    p.set_grad(randn(s, {.dtype = dt}, &gen) * grad_scale);
    ps.push_back(p);
  }
  return ps;
}

std::vector<Tensor> clone_with_grads(const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const auto& p : ps) {
    Tensor q = p.detach().clone().requires_grad_(true);
    q.set_grad(p.grad().clone());
    out.push_back(q);
  }
  return out;
}

}  // namespace

TEST(ClipGradNorm, FusedEqualsComposite) {
  for (DType dt : {kF64, kF32})
    for (double scale : {1e-3, 1.0}) {  // total about 0.2 (not clipped) and 200 (clipped)
      SCOPED_TRACE(std::string(dtype_name(dt)) + " scale " + std::to_string(scale));
      auto a = params_with_grads(dt, scale, 11), b = clone_with_grads(a);
      const double tol = dt == kF64 ? 1e-12 : 1e-5;
      Tensor fused = nn::clip_grad_norm_(a, 1.0), comp = nn::clip_grad_norm_composite(b, 1.0);
      EXPECT_EQ(fused.dtype(), dt);
      EXPECT_NEAR(fused.item(), comp.item(), tol * comp.item());
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_LT(max(abs(a[i].grad().to(kF64) - b[i].grad().to(kF64))).item(), tol) << i;
    }
}

TEST(ClipGradNorm, SumOfSquaresIsExactAndRepeatable) {
  Tensor a = from_vector<double>({3.0, 4.0}, {2}), b = from_vector<double>({12.0}, {1});
  EXPECT_EQ(backend_for(kCPU).sum_of_squares({a, b}).item(), 169.0);
  auto ps = params_with_grads(kF32, 1.0, 12);
  std::vector<Tensor> gs;
  for (const auto& p : ps) gs.push_back(p.grad());
  const float first = backend_for(kCPU).sum_of_squares(gs).item<float>();
  EXPECT_EQ(backend_for(kCPU).sum_of_squares(gs).item<float>(), first);
}

TEST(ClipGradNorm, BadListsAreNamed) {
  Tensor f = ones({3}), d = ones({3}, {.dtype = kF64});
  try {
    backend_for(kCPU).sum_of_squares({f, d});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("sum_of_squares"), std::string::npos) << m;
    EXPECT_NE(m.find("tensor 1"), std::string::npos) << m;
  }
  EXPECT_THROW(backend_for(kCPU).scale_by_({ones({4, 4}).t()}, ones({})), Error);  // strided
  EXPECT_THROW(backend_for(kCPU).scale_by_({f}, ones({}, {.dtype = kF64})), Error);
}

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.detach().to(kF64) - b.detach().to(kF64))).item();
}

// Two AdamW steps over `a` with the clip in place, and over its clone with the clip inside the
// update; returns the largest difference between the two sets of parameters afterwards.
double adamw_in_place_against_in_step(DType dt, bool fused, double grad_scale) {
  auto a = params_with_grads(dt, grad_scale, 21), b = clone_with_grads(a);
  optim::AdamWOptions o{.lr = 0.1, .weight_decay = 0.1, .fused = fused};
  optim::AdamW oa(a, o), ob(b, o);
  Generator gen(24);
  for (int step = 0; step < 2; ++step) {
    if (step > 0)  // new gradients, as the next backward makes
      for (size_t i = 0; i < a.size(); ++i) {
        a[i].set_grad(randn(a[i].shape(), {.dtype = dt}, &gen) * grad_scale);
        b[i].set_grad(a[i].grad().clone());
      }
    Tensor ta = nn::clip_grad_norm_(a, 1.0);
    oa.step();
    std::vector<Tensor> grads_before;
    for (const auto& p : b) grads_before.push_back(p.grad().clone());
    Tensor tb = ob.clip_grad_norm_in_step(1.0);
    EXPECT_EQ(ta.item(), tb.item());
    for (size_t i = 0; i < b.size(); ++i)  // .grad is left as backward made it
      EXPECT_EQ(max_diff(b[i].grad(), grads_before[i]), 0.0) << i;
    ob.step();
  }
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, max_diff(a[i], b[i]));
  return d;
}

}  // namespace

TEST(ClipInStep, AdamWsUpdateEqualsTheClipFollowedByTheUpdate) {
  for (DType dt : {kF64, kF32})
    for (bool fused : {true, false})
      for (double scale : {1e-3, 1.0}) {  // not clipped (coefficient 1) and clipped
        SCOPED_TRACE(std::string(dtype_name(dt)) + (fused ? " fused" : " composite") + " scale " +
                     std::to_string(scale));
        // The CPU loop may contract the product into the next operation: a rounding apart.
        EXPECT_LE(adamw_in_place_against_in_step(dt, fused, scale), dt == kF64 ? 1e-15 : 1e-7);
      }
}

TEST(ClipInStep, TheCoefficientMatters) {
  // Without the clip the parameters end elsewhere: the comparison above can fail.
  auto a = params_with_grads(kF32, 1.0, 21), b = clone_with_grads(a);
  optim::AdamW oa(a, {.lr = 0.1}), ob(b, {.lr = 0.1});
  nn::clip_grad_norm_(a, 1e-3);
  oa.step();
  ob.step();
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, max_diff(a[i], b[i]));
  EXPECT_GT(d, 1e-3);
}

TEST(ClipInStep, ZeroGradDropsAnUnusedCoefficientAndSgdClipsInPlace) {
  auto a = params_with_grads(kF32, 1.0, 22), b = clone_with_grads(a);
  optim::AdamW oa(a, {.lr = 0.1}), ob(b, {.lr = 0.1});
  ob.clip_grad_norm_in_step(1e-3);  // a step that never came (GradScaler skipped it on the host)
  ob.zero_grad();
  for (size_t i = 0; i < a.size(); ++i) b[i].set_grad(a[i].grad().clone());
  oa.step();
  ob.step();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(max_diff(a[i], b[i]), 0.0) << i;

  auto c = params_with_grads(kF32, 1.0, 23), d = clone_with_grads(c);
  optim::SGD sgd(c, {.lr = 0.1});
  Tensor total = sgd.clip_grad_norm_in_step(1.0);
  Tensor ref = nn::clip_grad_norm_(d, 1.0);
  EXPECT_EQ(total.item(), ref.item());
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(max_diff(c[i].grad(), d[i].grad()), 0.0) << i;
}
