// Channels-last on CUDA (Note [Channels-last]): batch norm (also with the residual add: a ResNet
// block's end) and max pooling (also in channel vectors) on channels-last inputs
// against the CPU backend and the NCHW kernels on the same values (and the layout they return),
// and autocast's channels-last convolutions (Note [Autocast channels-last]) against the same
// network with them turned off. Skipped without a GPU; compiles to nothing without
// LOOM_WITH_CUDA.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "autograd/amp/autocast.h"
#include "autograd/ops/conv_pool.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/norm.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/raw_ops.h"
#include "support/nn_kernels_support.h"

using namespace loom;
using namespace loom::testing;

#define SKIP_WITHOUT_CUDA() \
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace {

cuda::CudaBackend& be() { return cuda::cuda_backend(); }

Tensor cl(const Tensor& t) { return raw::channels_last(t); }

struct ClCase {
  Shape shape;
  DType dtype;
  DType param_dtype;
  double shift;  // added to x: a large mean tests the statistics' numerics
  bool relu;
};

// Each case picks a different vector width and tile: bf16 with C = 32 (8 channels a vector, 4
// vectors a row), C = 300 (4 a vector, 75-vector tiles: the coefficient walk wraps), f32 with
// C = 6 (2 a vector), f64, f16 with C = 5 (1 a vector), and many rows with a large mean.
std::vector<ClCase> cl_cases() {
  return {{{8, 32, 6, 5}, kBF16, kF32, 0.5, true}, {{2, 300, 3, 3}, kBF16, kBF16, 0.0, false},
          {{4, 6, 5, 4}, kF32, kF32, 0.0, true},   {{3, 4, 4, 5}, kF64, kF64, 1.0, false},
          {{2, 5, 3, 3}, kF16, kF32, 0.0, true},   {{64, 32, 16, 16}, kF32, kF32, 100.0, false}};
}

TEST(CudaChannelsLast, BatchNormMatchesCpuAndKeepsTheLayout) {
  SKIP_WITHOUT_CUDA();
  Backend& cpu = backend_for(kCPU);
  for (const ClCase& k : cl_cases()) {
    const std::string what =
        std::string(dtype_name(k.dtype)) + " " + str(k.shape) + (k.relu ? " relu" : "");
    SCOPED_TRACE(what);
    const int64_t C = k.shape[1];
    Tensor x = cl(random_tensor(k.shape, k.dtype, 31, gpu(), 2.0, k.shift));
    ASSERT_TRUE(raw::is_channels_last(x));
    Tensor w = random_tensor({C}, k.param_dtype, 32, gpu(), 0.5, 1.0),
           b = random_tensor({C}, k.param_dtype, 33, gpu());
    DType stat = k.dtype == kF64 ? kF64 : kF32;
    Tensor rm = random_tensor({C}, stat, 34, gpu()),
           rv = random_tensor({C}, stat, 35, gpu(), 0.1, 1.0);
    Tensor rm_cpu = rm.to(kCPU), rv_cpu = rv.to(kCPU);
    const double tol = k.dtype == kF64   ? 1e-10
                       : k.dtype == kF32 ? 2e-5
                       : k.dtype == kF16 ? 2e-3
                                         : 1e-2;

    BatchNormOut out = be().batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, k.relu);
    BatchNormOut ref = cpu.batch_norm(x.to(kCPU).contiguous(), w.to(kCPU), b.to(kCPU), rm_cpu,
                                      rv_cpu, true, 0.1, 1e-5, k.relu);
    EXPECT_TRUE(raw::is_channels_last(out.y)) << "y strides " << str(out.y.strides());
    EXPECT_LT(rel_err(out.y, host(ref.y)), tol) << "y";
    EXPECT_LT(rel_err(out.save_mean, host(ref.save_mean)), 1e-6) << "save_mean";
    EXPECT_LT(rel_err(out.save_invstd, host(ref.save_invstd)), 1e-5) << "save_invstd";
    EXPECT_LT(rel_err(rm, host(rm_cpu)), 1e-6) << "running_mean";
    EXPECT_LT(rel_err(rv, host(rv_cpu)), 1e-5) << "running_var";

    BatchNormOut ev = be().batch_norm(x, w, b, rm, rv, false, 0.1, 1e-5, k.relu);
    BatchNormOut ev_ref = cpu.batch_norm(x.to(kCPU).contiguous(), w.to(kCPU), b.to(kCPU), rm_cpu,
                                         rv_cpu, false, 0.1, 1e-5, k.relu);
    EXPECT_TRUE(raw::is_channels_last(ev.y));
    EXPECT_LT(rel_err(ev.y, host(ev_ref.y)), tol) << "eval y";

    Tensor gy = cl(random_tensor(k.shape, k.dtype, 36, gpu()));
    Tensor relu_out = k.relu ? out.y : Tensor(), relu_ref = k.relu ? ref.y : Tensor();
    BatchNormGrads gr =
        be().batch_norm_backward(gy, x, w, b, out.save_mean, out.save_invstd, relu_out);
    BatchNormGrads gr_ref =
        cpu.batch_norm_backward(gy.to(kCPU).contiguous(), x.to(kCPU).contiguous(), w.to(kCPU),
                                b.to(kCPU), ref.save_mean, ref.save_invstd, relu_ref);
    EXPECT_TRUE(raw::is_channels_last(gr.grad_input));
    EXPECT_LT(rel_err(gr.grad_input, host(gr_ref.grad_input)), 2 * tol) << "grad_input";
    EXPECT_LT(rel_err(gr.grad_weight, host(gr_ref.grad_weight)), tol) << "grad_weight";
    EXPECT_LT(rel_err(gr.grad_bias, host(gr_ref.grad_bias)), tol) << "grad_bias";
  }
}

TEST(CudaChannelsLast, MaxPoolMatchesNchwAndKeepsTheLayout) {
  SKIP_WITHOUT_CUDA();
  struct Case {
    Shape shape;
    Pool2dParams p;
  };
  Pool2dParams two, three;
  two.kernel = two.stride = {2, 2};
  three.kernel = {3, 3}, three.stride = {2, 2}, three.padding = {1, 1};  // overlapping windows
  for (const Case& k : {Case{{4, 16, 8, 8}, two}, Case{{2, 5, 9, 7}, three}})
    for (DType dt : {kF32, kBF16, kF64}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + str(k.shape));
      Tensor x = random_tensor(k.shape, dt, 41, gpu());
      auto [y, idx] = be().max_pool2d(x, k.p);
      auto [y_cl, idx_cl] = be().max_pool2d(cl(x), k.p);
      EXPECT_TRUE(raw::is_channels_last(y_cl));
      EXPECT_TRUE(raw::is_channels_last(idx_cl));
      EXPECT_EQ(host(y_cl), host(y));  // a max is exact
      EXPECT_EQ(idx_cl.to_vector<int64_t>(), idx.to_vector<int64_t>());
      Tensor gy = random_tensor(y.shape(), dt, 42, gpu());
      Tensor gx = be().max_pool2d_backward(gy, idx, k.shape, k.p);
      for (bool naive : {false, true}) {
        cuda::set_use_naive_kernels(naive);  // the scatter kept beside the gather
        Tensor gx_cl = be().max_pool2d_backward(cl(gy), idx_cl, k.shape, k.p);
        cuda::set_use_naive_kernels(false);
        EXPECT_TRUE(raw::is_channels_last(gx_cl)) << (naive ? "scatter" : "gather");
        EXPECT_LT(rel_err(gx_cl, host(gx)), dt == kBF16 ? 1e-2 : 1e-6)
            << (naive ? "scatter" : "gather");
      }
      // A gradient in another layout (mean's backward gives an expanded one) is read as it is.
      Tensor gx_any = be().max_pool2d_backward(gy, idx_cl, k.shape, k.p);
      EXPECT_TRUE(raw::is_channels_last(gx_any));
      EXPECT_LT(rel_err(gx_any, host(gx)), 1e-6);
    }
}

// t's values in a channels-last tensor whose data starts one element past a 16-byte boundary: the
// channel-vector pooling kernels decline it and the general channels-last kernels run.
Tensor misaligned_cl(const Tensor& t) {
  const Shape& s = t.shape();
  Tensor flat = empty({t.numel() + 1}, {.dtype = t.dtype(), .device = gpu()});
  Tensor nhwc = raw::view(raw::slice(flat, 0, 1, t.numel() + 1, 1), {s[0], s[2], s[3], s[1]});
  Tensor v = raw::permute(nhwc, {0, 3, 1, 2});
  v.copy_(t);
  EXPECT_TRUE(raw::is_channels_last(v));
  return v;
}

// Equal element for element, NaN equal to NaN.
::testing::AssertionResult same_values(const Tensor& want, const Tensor& got) {
  std::vector<double> w = host(want), g = host(got);
  if (w.size() != g.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < w.size(); ++i)
    if (!(w[i] == g[i] || (std::isnan(w[i]) && std::isnan(g[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << ", want " << w[i];
  return ::testing::AssertionSuccess();
}

// Note [Channels-last pooling in channel vectors]: on data full of ties, NaNs and -inf, with
// overlapping windows (ResNet's stem: 3 x 3, stride 2, padding 1; and 5 x 5, stride 1, padding 2)
// and windows that leave cells uncovered (2 x 2 over odd sizes), the vector kernels give the
// general channels-last kernels' values, indices and gradients bit for bit, in every dtype and
// with several vectors per pixel.
TEST(CudaChannelsLast, MaxPoolInChannelVectorsMatchesTheGeneralKernelsBitForBit) {
  SKIP_WITHOUT_CUDA();
  Pool2dParams stem, wide, two;
  stem.kernel = {3, 3}, stem.stride = {2, 2}, stem.padding = {1, 1};
  wide.kernel = {5, 5}, wide.stride = {1, 1}, wide.padding = {2, 2};
  two.kernel = two.stride = {2, 2};
  struct Case {
    DType dt;
    int64_t C;  // 3 vectors of 16 bytes, 2 for float16
  };
  for (const Case& c : {Case{kBF16, 24}, Case{kF16, 16}, Case{kF32, 12}, Case{kF64, 6}})
    for (const Pool2dParams& p : {stem, wide, two}) {
      const Shape shape{3, c.C, 11, 9};
      SCOPED_TRACE(std::string(dtype_name(c.dt)) + " " + str(shape) + " kernel " +
                   std::to_string(p.kernel[0]));
      std::vector<double> xv = host(random_tensor(shape, kF64, 51, kCPU, 2.0));
      for (size_t i = 0; i < xv.size(); ++i) {
        xv[i] = std::round(xv[i] * 2) / 2;  // ties
        if (i % 37 == 5) xv[i] = std::nan("");
        if (i % 41 == 7) xv[i] = -INFINITY;
      }
      Tensor x = cl(from_vector(xv, shape).to(c.dt).to(gpu()));
      auto [y, idx] = be().max_pool2d(x, p);                         // channel vectors
      auto [y_ref, idx_ref] = be().max_pool2d(misaligned_cl(x), p);  // the general kernel
      EXPECT_TRUE(raw::is_channels_last(y) && raw::is_channels_last(idx));
      EXPECT_TRUE(same_values(y_ref, y));
      EXPECT_EQ(idx.to_vector<int64_t>(), idx_ref.to_vector<int64_t>());
      Tensor gy = cl(random_tensor(y.shape(), c.dt, 52, gpu()));
      Tensor gx = be().max_pool2d_backward(gy, idx, shape, p);
      Tensor gx_ref = be().max_pool2d_backward(misaligned_cl(gy), idx, shape, p);
      EXPECT_TRUE(raw::is_channels_last(gx));
      EXPECT_TRUE(same_values(gx_ref, gx));
    }
}

// batch_norm_add_relu (Note [Batch norm's fusions]) on the GPU, as a ResNet block's end runs it
// under bf16 autocast (channels-last bf16 activations, float32 weight and bias) and in float32
// NCHW, against the composite relu(batch_norm(x) + residual) in float64 on the CPU from the same
// values: y (keeping the layout) and the gradients of x, weight, bias and the residual.
TEST(CudaBatchNormAddRelu, MatchesTheCompositeInFloat64) {
  SKIP_WITHOUT_CUDA();
  for (bool channels_last : {true, false}) {
    SCOPED_TRACE(channels_last ? "bf16 channels-last" : "f32 NCHW");
    const DType dt = channels_last ? kBF16 : kF32;
    const Shape s{8, 32, 6, 5};
    Tensor x0 = random_tensor(s, dt, 61, gpu(), 1.5, 0.3), r0 = random_tensor(s, dt, 62, gpu());
    Tensor gy = random_tensor(s, dt, 65, gpu());
    if (channels_last) x0 = cl(x0), r0 = cl(r0), gy = cl(gy);
    Tensor w0 = random_tensor({32}, kF32, 63, gpu(), 0.5, 1.0),
           b0 = random_tensor({32}, kF32, 64, gpu());
    auto run = [](std::vector<Tensor> in, const Tensor& g, bool fused) {
      for (Tensor& t : in) t = t.detach().requires_grad_();
      Tensor y;
      {
        std::optional<amp::Autocast> guard;
        if (in[0].dtype() == kBF16) guard.emplace(kBF16);
        y = fused ? batch_norm_add_relu(in[0], in[3], in[1], in[2], Tensor(), Tensor(), true)
                  : relu(batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true) + in[3]);
      }
      y.backward(g);
      return std::vector<Tensor>{y, in[0].grad(), in[1].grad(), in[2].grad(), in[3].grad()};
    };
    auto f64 = [](const Tensor& t) { return t.to(kCPU).to(kF64).contiguous(); };
    std::vector<Tensor> got = run({x0, w0, b0, r0}, gy, true);
    std::vector<Tensor> want = run({f64(x0), f64(w0), f64(b0), f64(r0)}, f64(gy), false);
    EXPECT_EQ(raw::is_channels_last(got[0]), channels_last);
    const char* names[] = {"y", "grad x", "grad weight", "grad bias", "grad residual"};
    const double tol = channels_last ? 2e-2 : 1e-4;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(rel_err(got[i], host(want[i])), tol) << names[i];
  }
}

// conv -> batch norm + ReLU -> max pool -> conv -> mean, the cnn's pattern, under bf16 autocast:
// channels-last from the first convolution on, and the same loss and float32 gradients as with
// channels-last convolutions turned off.
TEST(CudaChannelsLast, AutocastConvolutionsRunChannelsLastWithTheSameResults) {
  SKIP_WITHOUT_CUDA();
  Device d = gpu();
  Tensor x = random_tensor({8, 1, 12, 12}, kF32, 51, d);
  auto param = [&](const Shape& s, uint64_t seed, double scale, double shift = 0.0) {
    Tensor t = random_tensor(s, kF32, seed, d, scale, shift);
    t.requires_grad_(true);
    return t;
  };
  Tensor w1 = param({16, 1, 3, 3}, 52, 0.5), w2 = param({24, 16, 3, 3}, 53, 0.2);
  Tensor g1 = param({16}, 54, 0.2, 1.0), b1 = param({16}, 55, 0.2);
  Conv2dParams pad1;
  pad1.padding = {1, 1};
  Pool2dParams pool;
  pool.kernel = pool.stride = {2, 2};
  auto run = [&](bool channels_last, bool& conv_out_cl) {
    amp::set_channels_last_convolutions(channels_last);
    for (Tensor* t : {&w1, &w2, &g1, &b1}) t->set_grad(Tensor());
    Tensor loss;
    {
      amp::Autocast guard(kBF16);
      Tensor h = conv2d(x, w1, Tensor(), pad1);
      conv_out_cl = raw::is_channels_last(h);
      h = batch_norm(h, g1, b1, Tensor(), Tensor(), true, 0.1, 1e-5, /*relu=*/true);
      h = conv2d(max_pool2d(h, pool), w2, Tensor(), pad1);
      loss = mean(to(h, kF32) * to(h, kF32));
    }
    loss.backward();
    amp::set_channels_last_convolutions(true);
    std::vector<std::vector<double>> grads;
    for (Tensor* t : {&w1, &w2, &g1, &b1}) grads.push_back(host(t->grad()));
    grads.push_back({loss.item()});
    return grads;
  };
  bool cl_on = false, cl_off = true;
  auto with = run(true, cl_on), without = run(false, cl_off);
  EXPECT_TRUE(cl_on) << "the first convolution's output is not channels-last under autocast";
  EXPECT_FALSE(cl_off) << "channels-last convolutions were off, yet the output is channels-last";
  const char* names[] = {"conv1 weight", "conv2 weight", "bn weight", "bn bias", "loss"};
  for (size_t i = 0; i < with.size(); ++i)
    EXPECT_LT(rel_err(with[i], without[i]), 3e-2) << names[i];
}

}  // namespace

#endif  // LOOM_WITH_CUDA
