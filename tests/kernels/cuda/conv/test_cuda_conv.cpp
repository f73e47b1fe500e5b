// CUDA convolutions (cuDNN) against naive float64 loops: forward, grad of the input and grad of
// the weight, with stride, padding, dilation and groups (depthwise too), in f32 (strict, and with
// TF32 allowed), f64, f16 and bf16, plus the cnn workload's layer shapes; each through the graph
// API's cached plans and through the classic API kept as the reference (use_naive_kernels). Skipped
// without a GPU; compiles to nothing without LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "core/cuda/stream.h"
#include "kernels/cuda/conv/cudnn_conv.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/math_mode.h"
#include "support/nn_kernels_support.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

Conv2dParams params(std::array<int64_t, 2> stride, std::array<int64_t, 2> pad,
                    std::array<int64_t, 2> dil, int64_t groups) {
  Conv2dParams p;
  p.stride = stride, p.padding = pad, p.dilation = dil, p.groups = groups;
  return p;
}

struct ConvCase {
  std::string name;
  ConvShape g;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"plain3x3pad1", {2, 4, 9, 8, 6, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)}},
      {"stride2dil2groups2", {2, 4, 11, 10, 6, 3, 2, params({2, 2}, {0, 1}, {2, 2}, 2)}},
      {"depthwise", {3, 4, 8, 9, 8, 3, 3, params({2, 1}, {1, 2}, {1, 1}, 4)}},
      {"oneByOne", {4, 16, 5, 5, 8, 1, 1, params({1, 1}, {0, 0}, {1, 1}, 1)}},
      {"cnnFirstLayer", {8, 1, 28, 28, 32, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)}},
      {"cnnThirdLayer", {2, 64, 14, 14, 128, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)}},
  };
}

double conv_tol(DType dt) {
  switch (dt) {
    case DType::F64:
      return 1e-12;
    case DType::F32:
      return 2e-5;  // strict fp32 (Winograd/FFT algorithms stay near 1e-6)
    case DType::F16:
      return 3e-3;
    default:
      return 1.5e-2;
  }
}

class CudaConv : public ::testing::TestWithParam<ConvCase> {};

// Both paths: the graph API's plans, then the classic API (reset to the default on every exit).
struct EachConvPath {
  ~EachConvPath() { cuda::set_conv_path(cuda::ConvPath::Fastest); }
  static const char* name(bool classic) { return classic ? "classic API" : "graph API"; }
};

TEST_P(CudaConv, AllDirectionsMatchFloat64Loops) {
  SKIP_WITHOUT_CUDA();
  const ConvShape& g = GetParam().g;
  EachConvPath reset;
  for (bool classic : {false, true})
    for (DType dt : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
      SCOPED_TRACE(EachConvPath::name(classic));
      cuda::set_conv_path(classic ? cuda::ConvPath::ClassicApi : cuda::ConvPath::GraphApi);
      Tensor x = random_tensor({g.N, g.C, g.H, g.W}, dt, 1, gpu());
      Tensor w = random_tensor({g.K, g.Cg(), g.R, g.S}, dt, 2, gpu(), 0.3);
      Tensor gy = random_tensor({g.N, g.K, g.P(), g.Q()}, dt, 3, gpu());
      std::vector<double> xv = host(x), wv = host(w), gyv = host(gy);
      auto& be = cuda::cuda_backend();
      Tensor y = be.conv2d(x, w, g.p);
      ASSERT_EQ(y.shape(), (Shape{g.N, g.K, g.P(), g.Q()}));
      EXPECT_LT(rel_err(y, conv2d_ref(g, xv, wv)), conv_tol(dt)) << dtype_name(dt) << " forward";
      Tensor gx = be.conv2d_backward_input(gy, w, x.shape(), g.p);
      ASSERT_EQ(gx.shape(), x.shape());
      EXPECT_LT(rel_err(gx, conv2d_grad_input_ref(g, gyv, wv)), conv_tol(dt))
          << dtype_name(dt) << " grad input";
      Tensor gw = be.conv2d_backward_weight(gy, x, w.shape(), g.p);
      ASSERT_EQ(gw.shape(), w.shape());
      // The weight gradient sums N*P*Q products: allow the half types a little more.
      double tol_w = conv_tol(dt) * (dt == DType::F16 || dt == DType::BF16 ? 2 : 1);
      EXPECT_LT(rel_err(gw, conv2d_grad_weight_ref(g, gyv, xv)), tol_w)
          << dtype_name(dt) << " grad weight";
    }
}

INSTANTIATE_TEST_SUITE_P(Geometries, CudaConv, ::testing::ValuesIn(conv_cases()),
                         [](const ::testing::TestParamInfo<ConvCase>& i) { return i.param.name; });

TEST(CudaConvMisc, NonContiguousInputsAndRepeatedCalls) {
  SKIP_WITHOUT_CUDA();
  ConvShape g{2, 3, 7, 6, 5, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)};
  // x as a permuted view of an (N, H, W, C) tensor: channels-last, read as it is.
  Tensor x = random_tensor({g.N, g.H, g.W, g.C}, kF32, 4, gpu()).permute({0, 3, 1, 2});
  Tensor w = random_tensor({g.K, g.C, g.R, g.S}, kF32, 5, gpu());
  std::vector<double> want = conv2d_ref(g, host(x), host(w));
  for (int i = 0; i < 3; ++i)  // the cached plan gives the same answer
    EXPECT_LT(rel_err(cuda::cuda_backend().conv2d(x, w, g.p), want), conv_tol(kF32))
        << "call " << i;
}

// (N, C, H, W) with the strides of an (N, H, W, C) tensor: channels-last.
Tensor channels_last(const Shape& s, DType dt, uint64_t seed, double scale = 1.0) {
  return random_tensor({s[0], s[2], s[3], s[1]}, dt, seed, gpu(), scale).permute({0, 3, 1, 2});
}
bool is_channels_last(const Tensor& t) {
  return t.stride(1) == 1 && t.stride(3) == t.size(1) && t.stride(2) == t.size(3) * t.size(1);
}

TEST(CudaConvMisc, ChannelsLastTensorsKeepTheirLayoutOnBothPaths) {
  SKIP_WITHOUT_CUDA();
  EachConvPath reset;
  ConvShape g{3, 16, 10, 9, 24, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)};
  for (bool classic : {false, true})
    for (DType dt : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(EachConvPath::name(classic)) + " " + dtype_name(dt));
      cuda::set_conv_path(classic ? cuda::ConvPath::ClassicApi : cuda::ConvPath::GraphApi);
      Tensor x = channels_last({g.N, g.C, g.H, g.W}, dt, 11);
      Tensor w = channels_last({g.K, g.C, g.R, g.S}, dt, 12, 0.3);  // KRSC
      Tensor gy = channels_last({g.N, g.K, g.P(), g.Q()}, dt, 13);
      auto& be = cuda::cuda_backend();
      Tensor y = be.conv2d(x, w, g.p);
      EXPECT_TRUE(is_channels_last(y))
          << "forward output strides " << ::testing::PrintToString(y.strides());
      EXPECT_LT(rel_err(y, conv2d_ref(g, host(x), host(w))), conv_tol(dt));
      Tensor gx = be.conv2d_backward_input(gy, w, x.shape(), g.p);
      EXPECT_TRUE(is_channels_last(gx))
          << "input gradient strides " << ::testing::PrintToString(gx.strides());
      EXPECT_LT(rel_err(gx, conv2d_grad_input_ref(g, host(gy), host(w))), conv_tol(dt));
      Tensor gw = be.conv2d_backward_weight(gy, x, w.shape(), g.p);
      EXPECT_TRUE(gw.is_contiguous());
      EXPECT_LT(rel_err(gw, conv2d_grad_weight_ref(g, host(gy), host(x))), 2 * conv_tol(dt));
    }
}

TEST(CudaConvMisc, GraphApiBuildsOnePlanPerDirectionAndReusesIt) {
  SKIP_WITHOUT_CUDA();
  EachConvPath reset;
  cuda::set_conv_path(cuda::ConvPath::GraphApi);
  ConvShape g{4, 32, 12, 12, 64, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)};
  Tensor x = random_tensor({g.N, g.C, g.H, g.W}, kBF16, 8, gpu()),
         w = random_tensor({g.K, g.C, g.R, g.S}, kBF16, 9, gpu(), 0.3),
         gy = random_tensor({g.N, g.K, g.P(), g.Q()}, kBF16, 10, gpu());
  auto& be = cuda::cuda_backend();
  size_t before = cuda::graph_conv_plan_count();
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT(rel_err(be.conv2d(x, w, g.p), conv2d_ref(g, host(x), host(w))), conv_tol(kBF16));
    EXPECT_LT(rel_err(be.conv2d_backward_input(gy, w, x.shape(), g.p),
                      conv2d_grad_input_ref(g, host(gy), host(w))),
              conv_tol(kBF16));
    EXPECT_LT(rel_err(be.conv2d_backward_weight(gy, x, w.shape(), g.p),
                      conv2d_grad_weight_ref(g, host(gy), host(x))),
              2 * conv_tol(kBF16));
  }
  // bf16 3x3 convolutions have graph-API engines on every GPU cuDNN 9 supports: one plan for each
  // direction, built on the first call and reused by the next two.
  EXPECT_EQ(cuda::graph_conv_plan_count() - before, 3u);
}

TEST(CudaConvMisc, Tf32OnlyWhenAllowed) {
  SKIP_WITHOUT_CUDA();
  ConvShape g{16, 64, 14, 14, 64, 3, 3, params({1, 1}, {1, 1}, {1, 1}, 1)};
  Tensor x = random_tensor({g.N, g.C, g.H, g.W}, kF32, 6, gpu()),
         w = random_tensor({g.K, g.C, g.R, g.S}, kF32, 7, gpu());
  std::vector<double> want = conv2d_ref(g, host(x), host(w));
  double strict = rel_err(cuda::cuda_backend().conv2d(x, w, g.p), want);
  cuda::set_allow_tf32(true);
  double tf32 = rel_err(cuda::cuda_backend().conv2d(x, w, g.p), want);
  cuda::set_allow_tf32(false);
  EXPECT_LT(strict, conv_tol(kF32));
  EXPECT_LT(tf32, 5e-3);
  std::cout << "[          ] conv 16x64x14x14 -> 64, 3x3 rel. error: strict fp32 " << strict
            << ", tf32 " << tf32 << "\n";
}

}  // namespace

#endif  // LOOM_WITH_CUDA
