// A probe for issue 31's fused convolution + batch statistics (work in progress, not on main):
// asks cuDNN's graph API for engines that run a bf16 channels-last convolution with a GEN_STATS
// node on its output (per-channel sum and sum of squares in float32, what batch norm's forward
// reads its output once more for), reports each engine's index and whether it compiles kernels at
// run time, runs the first that finalizes and checks y, the sums and the squares against loom's
// own convolution and reductions. Skips, saying so, when no engine takes the graph.
// Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <cudnn.h>
#include <gtest/gtest.h>

#include <array>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/allocator.h"
#include "core/tensor_views.h"
#include "kernels/cuda/blas_handle.h"
#include "support/cuda_test_util.h"

using namespace loom;
using namespace loom::testing;

namespace {

// One backend descriptor (the probe's own: kernels/cuda/cudnn_conv_graph.cpp keeps its helpers
// private).
struct D {
  cudnnBackendDescriptor_t d = nullptr;
  explicit D(cudnnBackendDescriptorType_t t) { EXPECT_EQ(cudnnBackendCreateDescriptor(t, &d), 0); }
  D(D&& o) noexcept : d(std::exchange(o.d, nullptr)) {}
  D(const D&) = delete;
  ~D() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  template <typename T>
  D& set(cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t, const T* v, int64_t c = 1) {
    const cudnnStatus_t st = cudnnBackendSetAttribute(d, n, t, c, v);
    EXPECT_EQ(st, CUDNN_STATUS_SUCCESS)
        << "attribute " << int(n) << ": " << cudnnGetErrorString(st);
    return *this;
  }
  D& set(cudnnBackendAttributeName_t n, const D& o) {
    return set(n, CUDNN_TYPE_BACKEND_DESCRIPTOR, &o.d);
  }
  bool finalize() { return cudnnBackendFinalize(d) == CUDNN_STATUS_SUCCESS; }
};

D tensor(int64_t uid, const Tensor& t, cudnnDataType_t dt) {
  std::array<int64_t, 4> dims{}, strides{};
  for (int i = 0; i < 4; ++i) dims[size_t(i)] = t.size(i), strides[size_t(i)] = t.stride(i);
  const int64_t align = 16;
  D x(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  x.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dt)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  EXPECT_TRUE(x.finalize()) << "tensor " << uid;
  return x;
}

// Whether the engine behind an engine configuration compiles its kernels at run time, and its
// global index.
std::pair<bool, int64_t> engine_notes(const D& cfg) {
  D engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0, index = -1;
  cudnnBackendGetAttribute(cfg.d, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                           &engine.d);
  cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                           &index);
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> beh{};
  int64_t nb = 0;
  cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                           int64_t(beh.size()), &nb, beh.data());
  bool rtc = false;
  for (int64_t i = 0; i < nb && i < int64_t(beh.size()); ++i)
    rtc = rtc || beh[size_t(i)] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  return {rtc, index};
}

// The engine configurations of `graph` from heuristics `mode`, best first.
std::vector<D> configs(const D& graph, cudnnBackendHeurMode_t mode) {
  D heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (!heur.finalize()) return {};
  int64_t n = 0;
  cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                           &n, nullptr);
  std::vector<D> out;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    out.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(out.back().d);
  }
  int64_t got = 0;
  if (n > 0)
    cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                             n, &got, raw.data());
  while (int64_t(out.size()) > got) out.pop_back();
  return out;
}

}  // namespace

TEST(CudaConvGenstats, CudnnRunsAConvolutionWithItsBatchStatistics) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device g = cuda_device(0);
  manual_seed(31);
  // A ResNet-50 layer3 convolution at batch 16: 3x3, 256 -> 256 channels, 14 x 14.
  const int64_t N = 16, C = 256, K = 256, H = 14, W = 14;
  Tensor x = to_channels_last(randn({N, C, H, W}).to(kBF16).to(g));
  Tensor w = to_channels_last((randn({K, C, 3, 3}) * 0.03).to(kBF16).to(g));
  Tensor y = raw::empty_channels_last({N, K, H, W}, {.dtype = kBF16, .device = g});
  // (1, K, 1, 1) per-channel statistics, laid out as a channels-last tensor's would be.
  Tensor sum = raw::empty_channels_last({1, K, 1, 1}, {.dtype = kF32, .device = g});
  Tensor sq = raw::empty_channels_last({1, K, 1, 1}, {.dtype = kF32, .device = g});
  cudnnHandle_t h = cuda::dnn_handle(g.index);

  D xd = tensor('x', x, CUDNN_DATA_BFLOAT16), wd = tensor('w', w, CUDNN_DATA_BFLOAT16),
    yd = tensor('y', y, CUDNN_DATA_BFLOAT16), sd = tensor('s', sum, CUDNN_DATA_FLOAT),
    qd = tensor('q', sq, CUDNN_DATA_FLOAT);
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  const std::array<int64_t, 2> one{1, 1}, pad{1, 1};
  D conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &f32)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, one.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, one.data(), 2);
  ASSERT_TRUE(conv.finalize());
  const float alpha = 1, beta = 0;
  D fprop(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, xd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, wd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, yd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta);
  ASSERT_TRUE(fprop.finalize());
  cudnnGenStatsMode_t gmode = CUDNN_GENSTATS_SUM_SQSUM;
  D stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &gmode)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &f32)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, yd)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sd)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, qd);
  ASSERT_TRUE(stats.finalize());
  D graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const std::array<cudnnBackendDescriptor_t, 2> ops{fprop.d, stats.d};
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(), 2)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  if (!graph.finalize()) GTEST_SKIP() << "cuDNN does not take conv + genstats as one graph";

  // Every configuration heuristics offer, listed; plans are finalized for the precompiled engines
  // and, only when none of those finalizes, for at most two engines compiled at run time (each
  // can take seconds).
  std::vector<D> cfgs = configs(graph, CUDNN_HEUR_MODE_A);
  for (D& c : configs(graph, CUDNN_HEUR_MODE_FALLBACK)) cfgs.push_back(std::move(c));
  std::optional<D> plan;
  int64_t workspace = 0;
  bool plan_rtc = false;
  for (int pass = 0; pass < 2 && !plan; ++pass) {
    int rtc_tried = 0;
    for (const D& cfg : cfgs) {
      auto [rtc, index] = engine_notes(cfg);
      if (pass == 0)
        std::cout << "conv + genstats: engine " << index
                  << (rtc ? " (compiled at run time)" : " (precompiled)") << "\n";
      if (plan || rtc != (pass == 1) || (rtc && ++rtc_tried > 2)) continue;
      D p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
      if (!p.finalize()) continue;
      int64_t n = 0;
      cudnnBackendGetAttribute(p.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               &n, &workspace);
      std::cout << "conv + genstats: runs on engine " << index << "\n";
      plan.emplace(std::move(p));
      plan_rtc = rtc;
    }
  }
  if (!plan)
    GTEST_SKIP() << "cuDNN offers no engine for conv + genstats (" << cfgs.size() << " listed)";
  if (plan_rtc) std::cout << "conv + genstats: only an engine compiled at run time runs it\n";

  DataPtr ws = allocator_for(g).allocate(size_t(workspace));
  void* ws_ptr = ws.get();
  const std::array<int64_t, 5> uids{'x', 'w', 'y', 's', 'q'};
  const std::array<void*, 5> ptrs{x.data_ptr(), w.data_ptr(), y.data_ptr(), sum.data_ptr(),
                                  sq.data_ptr()};
  D pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), 5)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), 5)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws_ptr);
  ASSERT_TRUE(pack.finalize());
  ASSERT_EQ(cudnnBackendExecute(h, plan->d, pack.d), CUDNN_STATUS_SUCCESS);

  // y against loom's convolution, the statistics against sums over loom's y.
  Tensor want = conv2d(x, w, Tensor(), Conv2dParams{.padding = {1, 1}}).to(kF32).to(kCPU);
  Tensor got = y.to(kF32).to(kCPU);
  EXPECT_TRUE(all_close(want, got, 2e-2));
  Tensor y32 = got;
  Tensor want_sum = loom::sum(y32, {0, 2, 3}), want_sq = loom::sum(y32 * y32, {0, 2, 3});
  const double scale_s = max(abs(want_sum)).item() + 1.0, scale_q = max(want_sq).item();
  EXPECT_TRUE(all_close(want_sum, sum.to(kCPU).reshape({K}), 1e-2 * scale_s));
  EXPECT_TRUE(all_close(want_sq, sq.to(kCPU).reshape({K}), 1e-2 * scale_q));
}

#endif  // LOOM_WITH_CUDA
