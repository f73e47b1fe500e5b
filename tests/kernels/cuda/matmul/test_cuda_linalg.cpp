// CUDA matrix products (cuBLASLt) against a float64 reference: mm and bmm for every transpose
// combination and for strided, offset and broadcast layouts, in f32 (strict, and with TF32
// allowed), f64, f16 and bf16; the fused linear layer against the unfused ops and the reference;
// GELU's backward epilogues (its derivative, the bias gradient); and the plan cache. Skipped
// without a GPU; compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <iostream>
#include <string>

#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/math_mode.h"
#include "kernels/cuda/matmul/cuda_linear.h"
#include "kernels/cuda/matmul/lt_matmul.h"
#include "kernels/raw_ops.h"
#include "support/nn_kernels_support.h"
#include "support/reference.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

// Relative-error bound of a product with K terms in a given dtype (inputs already rounded).
double mm_tol(DType dt) {
  switch (dt) {
    case DType::F64:
      return 1e-13;
    case DType::F32:
      return 1e-5;  // strict fp32; TF32 would give about 3e-4
    case DType::F16:
      return 2e-3;  // output rounding (2^-11) dominates
    default:
      return 1e-2;  // bf16: output rounding (2^-8)
  }
}

// The float64 product of the values actually stored in a (M, K) and b (K, N) (any layout).
std::vector<double> mm_ref(const Tensor& a, const Tensor& b) {
  return ref::matmul2d(ref::Array{a.shape(), host(a)}, ref::Array{b.shape(), host(b)}).v;
}

// A (R, C) operand: contiguous, a transposed view of a (C, R) tensor, or a column-slice of a
// wider tensor (row stride > C, and a data pointer not 16-byte aligned).
enum class Layout { Rows, Transposed, Sliced, Strided };
const char* layout_name(Layout l) {
  return l == Layout::Rows         ? "rows"
         : l == Layout::Transposed ? "transposed"
         : l == Layout::Sliced     ? "sliced"
                                   : "strided";
}

Tensor make_operand(int64_t R, int64_t C, Layout l, DType dt, uint64_t seed) {
  switch (l) {
    case Layout::Rows:
      return random_tensor({R, C}, dt, seed, gpu());
    case Layout::Transposed:
      return random_tensor({C, R}, dt, seed, gpu()).t();
    case Layout::Sliced:
      return random_tensor({R, C + 5}, dt, seed, gpu()).slice(1, 1, C + 1);
    case Layout::Strided:
      return random_tensor({R, 2 * C}, dt, seed, gpu()).slice(1, 0, 2 * C, 2);
  }
  return Tensor();
}

struct MmCase {
  DType dtype;
  Layout la, lb;
};

class CudaMm : public ::testing::TestWithParam<MmCase> {};

TEST_P(CudaMm, MatchesFloat64Reference) {
  SKIP_WITHOUT_CUDA();
  MmCase c = GetParam();
  for (auto [M, K, N] : {std::array<int64_t, 3>{67, 129, 45}, std::array<int64_t, 3>{256, 512, 384},
                         std::array<int64_t, 3>{1, 64, 33}}) {
    Tensor a = make_operand(M, K, c.la, c.dtype, 11 + M),
           b = make_operand(K, N, c.lb, c.dtype, 23 + N);
    Tensor out = cuda::cuda_backend().mm(a, b);
    ASSERT_EQ(out.shape(), (Shape{M, N}));
    ASSERT_EQ(out.dtype(), c.dtype);
    double err = rel_err(out, mm_ref(a, b));
    EXPECT_LT(err, mm_tol(c.dtype)) << dtype_name(c.dtype) << " " << layout_name(c.la) << " x "
                                    << layout_name(c.lb) << " M=" << M << " K=" << K << " N=" << N;
  }
}

std::vector<MmCase> mm_cases() {
  std::vector<MmCase> cs;
  for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (Layout la : {Layout::Rows, Layout::Transposed, Layout::Sliced, Layout::Strided})
      for (Layout lb : {Layout::Rows, Layout::Transposed, Layout::Sliced, Layout::Strided})
        if (dt == DType::F32 || (la != Layout::Strided && lb != Layout::Strided))
          cs.push_back({dt, la, lb});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, CudaMm, ::testing::ValuesIn(mm_cases()),
                         [](const ::testing::TestParamInfo<MmCase>& i) {
                           return std::string(dtype_name(i.param.dtype)) + "_" +
                                  layout_name(i.param.la) + "_" + layout_name(i.param.lb);
                         });

TEST(CudaMm, Tf32IsOffByDefaultAndSwitchable) {
  SKIP_WITHOUT_CUDA();
  ASSERT_FALSE(cuda::allow_tf32());
  Tensor a = random_tensor({512, 1024}, kF32, 1, gpu()),
         b = random_tensor({1024, 256}, kF32, 2, gpu());
  std::vector<double> want = mm_ref(a, b);
  double strict = rel_err(cuda::cuda_backend().mm(a, b), want);
  cuda::set_allow_tf32(true);
  double tf32 = rel_err(cuda::cuda_backend().mm(a, b), want);
  cuda::set_allow_tf32(false);
  double strict_again = rel_err(cuda::cuda_backend().mm(a, b), want);
  EXPECT_LT(strict, 1e-5);
  EXPECT_LT(strict_again, 1e-5);
  EXPECT_LT(tf32, 5e-3);  // TF32 keeps 10 mantissa bits: about 3e-4 here
  std::cout << "[          ] mm 512x1024x256 rel. error: strict fp32 " << strict << ", tf32 "
            << tf32 << "\n";
}

TEST(CudaMm, EmptyAndZeroK) {
  SKIP_WITHOUT_CUDA();
  Tensor a = random_tensor({3, 0}, kF32, 1, gpu()), b = random_tensor({0, 4}, kF32, 2, gpu());
  Tensor out = cuda::cuda_backend().mm(a, b);
  ASSERT_EQ(out.shape(), (Shape{3, 4}));
  for (double v : host(out)) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(cuda::cuda_backend()
                .mm(random_tensor({0, 5}, kF32, 3, gpu()), random_tensor({5, 4}, kF32, 4, gpu()))
                .numel(),
            0);
}

TEST(CudaMm, PlanCacheReusesPlans) {
  SKIP_WITHOUT_CUDA();
  Tensor a = random_tensor({37, 91}, kF32, 5, gpu()), b = random_tensor({91, 53}, kF32, 6, gpu());
  cuda::cuda_backend().mm(a, b);
  size_t n = cuda::lt_plan_cache_size();
  for (int i = 0; i < 3; ++i) cuda::cuda_backend().mm(a, b);
  EXPECT_EQ(cuda::lt_plan_cache_size(), n);
  cuda::cuda_backend().mm(a, random_tensor({91, 54}, kF32, 7, gpu()));
  EXPECT_EQ(cuda::lt_plan_cache_size(), n + 1);
}

// ---------------------------------------------------------------- bmm
TEST(CudaBmm, TransposeCombinationsAndBroadcastBatch) {
  SKIP_WITHOUT_CUDA();
  const int64_t B = 5, M = 33, K = 70, N = 29;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool bcast : {false, true}) {
          Tensor a = ta ? random_tensor({B, K, M}, dt, 1, gpu()).transpose(1, 2)
                        : random_tensor({B, M, K}, dt, 1, gpu());
          Tensor b = tb ? random_tensor({B, N, K}, dt, 2, gpu()).transpose(1, 2)
                        : random_tensor({B, K, N}, dt, 2, gpu());
          if (bcast)
            b = random_tensor({1, K, N}, dt, 3, gpu()).expand({B, K, N});  // batch stride 0
          Tensor out = cuda::cuda_backend().bmm(a, b);
          ASSERT_EQ(out.shape(), (Shape{B, M, N}));
          for (int64_t i = 0; i < B; ++i) {
            double err = rel_err(out.select(0, i), mm_ref(a.select(0, i), b.select(0, i)));
            EXPECT_LT(err, mm_tol(dt)) << dtype_name(dt) << " ta=" << ta << " tb=" << tb
                                       << " bcast=" << bcast << " batch " << i;
          }
        }
}

// ---------------------------------------------------------------- fused linear
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(CudaLinearFused, MatchesReferenceAndUnfusedOps) {
  SKIP_WITHOUT_CUDA();
  const int64_t K = 96, N = 50;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (bool with_bias : {true, false})
      for (cuda::Activation act :
           {cuda::Activation::None, cuda::Activation::Relu, cuda::Activation::GeluTanh})
        for (Shape xs : {Shape{70, K}, Shape{2, 35, K}}) {
          Tensor x = random_tensor(xs, dt, 1, gpu()), w = random_tensor({N, K}, dt, 2, gpu());
          Tensor b = with_bias ? random_tensor({N}, dt, 3, gpu()) : Tensor();
          Tensor y = cuda::linear_fused(x, w, b, act);
          Shape ys = xs;
          ys.back() = N;
          ASSERT_EQ(y.shape(), ys);
          // float64 reference from the stored values
          Tensor x2 = x.reshape({-1, K});
          std::vector<double> want = mm_ref(x2, w.t());
          std::vector<double> bv = with_bias ? host(b) : std::vector<double>(size_t(N), 0.0);
          for (size_t i = 0; i < want.size(); ++i) {
            double v = want[i] + bv[i % size_t(N)];
            want[i] = act == cuda::Activation::Relu       ? std::max(v, 0.0)
                      : act == cuda::Activation::GeluTanh ? gelu_tanh(v)
                                                          : v;
          }
          std::string what = std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias") +
                             " act " + std::to_string(int(act)) + " rank " +
                             std::to_string(xs.size());
          EXPECT_LT(rel_err(y, want), mm_tol(dt)) << what;
          // The unfused ops on the same device: mm, add, relu.
          if (act != cuda::Activation::GeluTanh) {
            Tensor u = cuda::cuda_backend().mm(x2, w.t());
            if (with_bias) u = cuda::cuda_backend().binary(BinaryOp::Add, u, b);
            if (act == cuda::Activation::Relu) u = cuda::cuda_backend().unary(UnaryOp::Relu, u);
            EXPECT_LT(rel_err(y.reshape({-1, N}), host(u)), dt == DType::F32 ? 1e-6 : mm_tol(dt))
                << what << " vs unfused";
          }
        }
}

// GELU's aux epilogue (what loom::linear's GeluTanh runs on CUDA): one product writes y =
// gelu_tanh(x w^T + b) and the pre-activation x w^T + b, both against the float64 reference; the
// 3-d input folds into rows; a width that is not a multiple of 8 is refused.
TEST(CudaLinearFused, GeluTanhAuxEpilogue) {
  SKIP_WITHOUT_CUDA();
  const int64_t K = 64, N = 48;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (bool with_bias : {true, false})
      for (Shape xs : {Shape{70, K}, Shape{2, 35, K}}) {
        Tensor x = random_tensor(xs, dt, 4, gpu()), w = random_tensor({N, K}, dt, 5, gpu());
        Tensor b = with_bias ? random_tensor({N}, dt, 6, gpu()) : Tensor();
        Tensor pre;
        Tensor y = cuda::linear_fused(x, w, b, cuda::Activation::GeluTanh, &pre);
        ASSERT_TRUE(pre.defined());
        ASSERT_EQ(pre.shape(), y.shape());
        std::vector<double> want_pre = mm_ref(x.reshape({-1, K}), w.t()), want_y(want_pre.size());
        std::vector<double> bv = with_bias ? host(b) : std::vector<double>(size_t(N), 0.0);
        for (size_t i = 0; i < want_pre.size(); ++i) {
          want_pre[i] += bv[i % size_t(N)];
          want_y[i] = gelu_tanh(want_pre[i]);
        }
        const std::string what = std::string(dtype_name(dt)) + (with_bias ? " bias" : " no bias") +
                                 " rank " + std::to_string(xs.size());
        EXPECT_LT(rel_err(pre, want_pre), mm_tol(dt)) << what << " pre-activation";
        EXPECT_LT(rel_err(y, want_y), mm_tol(dt)) << what << " output";
      }
  Tensor pre;
  EXPECT_THROW(cuda::linear_fused(random_tensor({4, 8}, kF32, 1, gpu()),
                                  random_tensor({6, 8}, kF32, 2, gpu()), Tensor(),
                                  cuda::Activation::GeluTanh, &pre),
               Error);
}

TEST(CudaLinearFused, RejectsBadArguments) {
  SKIP_WITHOUT_CUDA();
  Tensor x = random_tensor({4, 8}, kF32, 1, gpu()), w = random_tensor({3, 7}, kF32, 2, gpu());
  try {
    cuda::linear_fused(x, w, Tensor());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_fused"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3, 7]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::linear_fused(random_tensor({4, 8}, kF64, 1, gpu()),
                                  random_tensor({3, 8}, kF64, 2, gpu()), Tensor()),
               Error);
}

// mm with a float32 result from bfloat16 and float16 inputs (a Linear's weight gradient: Note
// [Float32 weight gradients]): within float32 rounding of the float64 product, with no 16-bit
// rounding of the output; a transposed operand as the weight gradient has it.
TEST(CudaMmOutDtype, Float32ResultFrom16BitInputs) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::BF16, DType::F16}) {
    Tensor g = random_tensor({256, 48}, dt, 16, gpu()), x = random_tensor({256, 64}, dt, 17, gpu());
    Tensor w = cuda::cuda_backend().mm(g.t(), x, DType::F32);  // (48, 64)
    ASSERT_EQ(w.dtype(), DType::F32);
    EXPECT_LT(rel_err(w, mm_ref(g.t(), x)), 1e-5) << dtype_name(dt);
  }
  EXPECT_THROW(cuda::cuda_backend().mm(random_tensor({4, 4}, kF32, 1, gpu()),
                                       random_tensor({4, 4}, kF32, 2, gpu()), DType::BF16),
               Error);
}

// ---- GELU's backward in cuBLASLt's epilogues (Note [Fused MLP] in autograd/ops/linalg.cpp) ----

// d/dx of the tanh GELU in float64.
double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI), t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

// cuBLASLt itself (an error, not a fallback, if it has no algorithm), with the arguments
// Backend::mm_gelu_tanh_backward passes: the DGELU epilogue's (g @ w) * gelu_tanh'(pre), against
// float64.
TEST(CudaLinearBackward, DGeluEpilogueMultipliesByTheDerivative) {
  SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const int64_t M = 96, N = 40, K = 64;
    Tensor g = random_tensor({M, N}, dt, 9, gpu()), w = random_tensor({N, K}, dt, 10, gpu());
    Tensor pre = random_tensor({M, K}, dt, 11, gpu());
    Tensor out = empty({M, K}, {.dtype = dt, .device = gpu()});
    cuda::LtMatmulArgs a;
    a.device = gpu().index;
    a.dtype = dt;
    a.m = K, a.n = M, a.k = N;  // column-major out^T (K x M) = w^T (K x N) @ g^T (N x M)
    a.a = {w.data_ptr(), false, K, N, K, 0};
    a.b = {g.data_ptr(), false, N, M, N, 0};
    a.d = out.data_ptr();
    a.ldd = K;
    a.epilogue = cuda::LtEpilogue::DGeluTanh;
    a.aux = pre.data_ptr();
    a.ld_aux = K;
    cuda::lt_matmul(a);
    std::vector<double> want = mm_ref(g, w), pv = host(pre);
    for (size_t i = 0; i < want.size(); ++i) want[i] *= gelu_tanh_grad(pv[i]);
    EXPECT_LT(rel_err(out, want), mm_tol(dt)) << dtype_name(dt);
  }
}

// The backend method against the CPU's composite on the same values: the epilogue paths (a
// hidden width that is a multiple of 8, g contiguous or a transposed view, with and without the
// bias sums) and the composed fallbacks (float64, a hidden width of 20).
TEST(CudaLinearBackward, BackendMethodMatchesTheCpuComposite) {
  SKIP_WITHOUT_CUDA();
  Backend& cpu = backend_for(kCPU);
  Backend& cu = cuda::cuda_backend();
  for (DType dt : {DType::F32, DType::BF16, DType::F64})
    for (int64_t K : {64, 20})
      for (bool transposed_g : {false, true})
        for (bool bias : {false, true}) {
          const int64_t M = 72, N = 24;
          Tensor g = transposed_g ? random_tensor({N, M}, dt, 12, gpu()).t()
                                  : random_tensor({M, N}, dt, 12, gpu());
          Tensor w = random_tensor({N, K}, dt, 14, gpu()),
                 pre = random_tensor({M, K}, dt, 15, gpu());
          const std::string what = std::string(dtype_name(dt)) + " K " + std::to_string(K) +
                                   (transposed_g ? " g transposed" : "") + (bias ? " bias" : "");
          GeluBackwardOut got = cu.mm_gelu_tanh_backward(g, w, pre, bias);
          GeluBackwardOut want =
              mm_gelu_tanh_backward_composite(cpu, g.to(kCPU), w.to(kCPU), pre.to(kCPU), bias);
          EXPECT_LT(rel_err(got.grad, host(want.grad)), mm_tol(dt)) << what;
          ASSERT_EQ(got.bias.defined(), bias) << what;
          if (bias) {
            EXPECT_LT(rel_err(got.bias, host(want.bias)), mm_tol(dt)) << what << " bias";
          }
        }
}

}  // namespace

#endif  // LOOM_WITH_CUDA
