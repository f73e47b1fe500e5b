// What cuDNN's graph API offers for issue 31's fused convolution + batch norm, asked of the
// library itself: (A) a bf16 channels-last 3x3 convolution with a GEN_STATS node on its output
// (the per-channel sum and sum of squares in float32 that batch norm's statistics pass reads the
// output once more for), and (B) the same with batch norm's apply and the ReLU of the previous
// layer as the convolution's prologue (x * scale + shift, ReLU: cuDNN's ConvBNfprop pattern).
// Lists each engine heuristics offer and whether it compiles kernels at run time, finalizes a plan
// (precompiled engines first, then at most two runtime-compiled ones, timing the finalize), runs
// it, prints its time beside loom's convolution alone, and checks y and the sums against loom's
// convolution and reductions. On an H200 with cuDNN 9 (docs/perf.md): (A) only a
// runtime-compiled engine, about 1 s to compile for each shape and 0.060 ms a run against 0.029
// for the convolution alone; (B) no engine at all. That is why loom keeps its convolutions and
// batch-norm passes apart (Note [Batch norm's fusions], autograd/ops/norm.cpp). Skips, saying
// so, when neither graph runs; skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <cuda_runtime.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
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

// One backend descriptor (the probe's own: kernels/cuda/conv/cudnn_conv_graph.cpp keeps its helpers
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

// A pointwise node: y = op(x) or op(x, b).
D pointwise(cudnnPointwiseMode_t m, const D& x, const D* b, const D& y) {
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  D pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &m)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &f32);
  EXPECT_TRUE(pw.finalize());
  D op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  if (b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  EXPECT_TRUE(op.finalize());
  return op;
}

D virtual_tensor(int64_t uid, const Tensor& like) {
  std::array<int64_t, 4> dims{}, strides{};
  for (int i = 0; i < 4; ++i) dims[size_t(i)] = like.size(i), strides[size_t(i)] = like.stride(i);
  const int64_t align = 16;
  const bool yes = true;
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  D x(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  x.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &f32)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes);
  EXPECT_TRUE(x.finalize()) << "virtual tensor " << uid;
  return x;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Lists the engines heuristics offer for `graph`, finalizes a plan (precompiled engines first,
// then at most two compiled at run time, timing the finalize), runs it once with `uids`/`ptrs`
// and then `reps` more times, printing the mean time. False when no engine runs it.
bool run_graph(const char* name, const D& graph, cudnnHandle_t h, const std::vector<int64_t>& uids,
               std::vector<void*> ptrs, const Device& g, int reps) {
  std::vector<D> cfgs = configs(graph, CUDNN_HEUR_MODE_A);
  for (D& c : configs(graph, CUDNN_HEUR_MODE_FALLBACK)) cfgs.push_back(std::move(c));
  std::optional<D> plan;
  int64_t workspace = 0;
  for (int pass = 0; pass < 2 && !plan; ++pass) {
    int rtc_tried = 0;
    for (const D& cfg : cfgs) {
      auto [rtc, index] = engine_notes(cfg);
      if (pass == 0)
        std::cout << name << ": engine " << index
                  << (rtc ? " (compiled at run time)" : " (precompiled)") << "\n";
      if (plan || rtc != (pass == 1) || (rtc && ++rtc_tried > 2)) continue;
      D p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h)
          .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
      const double t0 = now_ms();
      const bool ok = p.finalize();
      std::cout << name << ": engine " << index << " finalize " << (ok ? "ok" : "failed") << " in "
                << now_ms() - t0 << " ms\n";
      if (!ok) continue;
      int64_t n = 0;
      cudnnBackendGetAttribute(p.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                               &n, &workspace);
      plan.emplace(std::move(p));
    }
  }
  if (!plan) {
    std::cout << name << ": no engine runs it (" << cfgs.size() << " listed)\n";
    return false;
  }
  DataPtr ws = allocator_for(g).allocate(size_t(std::max<int64_t>(workspace, 1)));
  void* ws_ptr = ws.get();
  D pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), int64_t(uids.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(),
           int64_t(ptrs.size()))
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &ws_ptr);
  EXPECT_TRUE(pack.finalize());
  EXPECT_EQ(cudnnBackendExecute(h, plan->d, pack.d), CUDNN_STATUS_SUCCESS);
  cudaDeviceSynchronize();
  const double t0 = now_ms();
  for (int i = 0; i < reps; ++i) cudnnBackendExecute(h, plan->d, pack.d);
  cudaDeviceSynchronize();
  std::cout << name << ": " << (now_ms() - t0) / reps << " ms per run\n";
  return true;
}

D conv_op(const D& xd, const D& wd, const D& yd) {
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
  EXPECT_TRUE(conv.finalize());
  const float alpha = 1, beta = 0;
  D fprop(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  fprop.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, xd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, wd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, yd)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, &alpha)
      .set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, &beta);
  EXPECT_TRUE(fprop.finalize());
  return fprop;
}

D genstats_op(const D& yd, const D& sd, const D& qd) {
  cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  cudnnGenStatsMode_t gmode = CUDNN_GENSTATS_SUM_SQSUM;
  D stats(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  stats.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &gmode)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &f32)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, yd)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sd)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, qd);
  EXPECT_TRUE(stats.finalize());
  return stats;
}

D op_graph(const std::vector<const D*>& ops, cudnnHandle_t h) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const D* o : ops) raw.push_back(o->d);
  D graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(),
           int64_t(raw.size()))
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  return graph;
}

}  // namespace

TEST(CudaConvGenstats, CudnnRunsAConvolutionWithItsBatchStatistics) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device g = cuda_device(0);
  manual_seed(31);
  // ResNet-50 layer3's 3x3 convolution at batch 64: 256 -> 256 channels, 14 x 14.
  const int64_t N = 64, C = 256, K = 256, H = 14, W = 14;
  Tensor x = to_channels_last(randn({N, C, H, W}).to(kBF16).to(g));
  Tensor w = to_channels_last((randn({K, C, 3, 3}) * 0.03).to(kBF16).to(g));
  Tensor y = raw::empty_channels_last({N, K, H, W}, {.dtype = kBF16, .device = g});
  // (1, K, 1, 1) per-channel statistics, laid out as a channels-last tensor's would be.
  Tensor sum = raw::empty_channels_last({1, K, 1, 1}, {.dtype = kF32, .device = g});
  Tensor sq = raw::empty_channels_last({1, K, 1, 1}, {.dtype = kF32, .device = g});
  Tensor scale = to_channels_last((rand({1, C, 1, 1}) + 0.5).to(g));
  Tensor shift = to_channels_last((randn({1, C, 1, 1}) * 0.1).to(g));
  cudnnHandle_t h = cuda::dnn_handle(g.index);

  D xd = tensor('x', x, CUDNN_DATA_BFLOAT16), wd = tensor('w', w, CUDNN_DATA_BFLOAT16),
    yd = tensor('y', y, CUDNN_DATA_BFLOAT16), sd = tensor('s', sum, CUDNN_DATA_FLOAT),
    qd = tensor('q', sq, CUDNN_DATA_FLOAT), ad = tensor('a', scale, CUDNN_DATA_FLOAT),
    bd = tensor('b', shift, CUDNN_DATA_FLOAT);

  // loom's convolution alone, timed, for comparison.
  Tensor want = conv2d(x, w, Tensor(), Conv2dParams{.padding = {1, 1}});
  cudaDeviceSynchronize();
  double t0 = now_ms();
  for (int i = 0; i < 50; ++i) want = conv2d(x, w, Tensor(), Conv2dParams{.padding = {1, 1}});
  cudaDeviceSynchronize();
  std::cout << "loom conv2d alone: " << (now_ms() - t0) / 50 << " ms per run\n";

  // (A) conv -> y -> genstats.
  D fprop = conv_op(xd, wd, yd), stats = genstats_op(yd, sd, qd);
  D graph = op_graph({&fprop, &stats}, h);
  bool ran = false;
  if (!graph.finalize()) {
    std::cout << "conv + genstats: the graph does not finalize\n";
  } else if (run_graph("conv + genstats", graph, h, {'x', 'w', 'y', 's', 'q'},
                       {x.data_ptr(), w.data_ptr(), y.data_ptr(), sum.data_ptr(), sq.data_ptr()}, g,
                       50)) {
    ran = true;
    Tensor got = y.to(kF32).to(kCPU), w32 = want.to(kF32).to(kCPU);
    EXPECT_TRUE(all_close(w32, got, 2e-2));
    Tensor want_sum = loom::sum(got, {0, 2, 3}), want_sq = loom::sum(got * got, {0, 2, 3});
    const double scale_s = max(abs(want_sum)).item() + 1.0, scale_q = max(want_sq).item();
    EXPECT_TRUE(all_close(want_sum, sum.to(kCPU).reshape({K}), 1e-2 * scale_s));
    EXPECT_TRUE(all_close(want_sq, sq.to(kCPU).reshape({K}), 1e-2 * scale_q));
  }

  // (B) relu(x * scale + shift) -> conv -> y -> genstats: batch norm's apply and the ReLU as the
  // convolution's prologue (cuDNN's ConvBNfprop pattern).
  D v1 = virtual_tensor(101, x), v2 = virtual_tensor(102, x), v3 = virtual_tensor(103, x);
  D mul = pointwise(CUDNN_POINTWISE_MUL, xd, &ad, v1),
    add = pointwise(CUDNN_POINTWISE_ADD, v1, &bd, v2),
    relu_node = pointwise(CUDNN_POINTWISE_RELU_FWD, v2, nullptr, v3);
  D fprop2 = conv_op(v3, wd, yd), stats2 = genstats_op(yd, sd, qd);
  D graph2 = op_graph({&mul, &add, &relu_node, &fprop2, &stats2}, h);
  if (!graph2.finalize()) {
    std::cout << "scale-shift-relu + conv + genstats: the graph does not finalize\n";
  } else if (run_graph("scale-shift-relu + conv + genstats", graph2, h,
                       {'x', 'w', 'y', 's', 'q', 'a', 'b'},
                       {x.data_ptr(), w.data_ptr(), y.data_ptr(), sum.data_ptr(), sq.data_ptr(),
                        scale.data_ptr(), shift.data_ptr()},
                       g, 50)) {
    ran = true;
    Tensor xin = relu(x.to(kF32) * scale + shift).to(kBF16);
    Tensor want2 = conv2d(xin, w, Tensor(), Conv2dParams{.padding = {1, 1}}).to(kF32).to(kCPU);
    Tensor got = y.to(kF32).to(kCPU);
    EXPECT_TRUE(all_close(want2, got, 3e-2));
    Tensor want_sum = loom::sum(got, {0, 2, 3});
    const double scale_s = max(abs(want_sum)).item() + 1.0;
    EXPECT_TRUE(all_close(want_sum, sum.to(kCPU).reshape({K}), 1e-2 * scale_s));
  }
  if (!ran) GTEST_SKIP() << "cuDNN runs neither fused graph";
}

#endif  // LOOM_WITH_CUDA
