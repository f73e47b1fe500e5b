// The fused 2-norm of clip_grad_norm_ (Note [Fused gradient norm] in kernels/backend_methods.inc)
// against clip_grad_norm_composite: the total and the clipped gradients in float64 and float32,
// with many tensors of odd sizes (several chunks, a tensor of one element), below and above the
// threshold; the sum of squares is the same bits run after run; bad lists give errors naming
// the op and the tensor. (CUDA against the CPU: CudaGradNorm.MatchesCpu.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/backend.h"
#include "nn/clip.h"

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
