// CUDA 2-d convolutions through cuDNN's classic API (cudnnConvolutionForward, ...BackwardData,
// ...BackwardFilter), NCHW, with stride, padding, dilation and groups. The algorithm is chosen
// once per (shape, dtype, direction, math mode) with cudnnFind*AlgorithmEx and cached.
// This is the reference path beside cudnn_conv_graph.cpp (Note [cuDNN plan cache] says why that
// one is faster) and the fallback for a convolution no graph-API engine takes.
// Leaves out: NHWC layouts, fused bias/activation, tensors of 2^31 or more elements (this API
// indexes with int).
#include <array>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/conv/cudnn_conv.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/math_mode.h"
#include "kernels/cuda/plan_key.h"

namespace loom::cuda {

namespace {

// Note [cuDNN algorithm choice]
// The first call for a key (device, dtype, math mode, direction, every size and parameter) runs
// cudnnFind*AlgorithmEx: cuDNN times each algorithm on the real buffers with a workspace as large
// as the hungriest algorithm wants (capped by free memory and kMaxFindWorkspace), and we keep the
// fastest that succeeded. Later calls reuse the cached descriptors, algorithm and workspace size.
// Find synchronises and cannot run inside a CUDA graph capture; a key first met while capturing
// takes cudnnGet*_v7's heuristic choice instead (and caches it). Math type: float32 uses
// CUDNN_FMA_MATH unless TF32 is allowed (Note [Strict fp32]); f16/bf16 ask for tensor-op math and
// keep the math type cuDNN reports for the chosen algorithm.

constexpr size_t kMaxFindWorkspace = size_t(1) << 30;

using ConvKey = PlanKeyOf<24>;

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;
  size_t workspace = 0;
  float ms = -1;  // Find's time for `algo`; -1 when a heuristic chose it (during a capture)

  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

struct ConvCache {
  std::mutex mu;
  std::unordered_map<ConvKey, std::unique_ptr<ConvPlan>, PlanKeyHash> plans;
};
ConvCache& conv_cache() {
  static ConvCache* cache = new ConvCache();  // never destroyed (used until exit)
  return *cache;
}

int as_int(const char* op, int64_t v) {
  LOOM_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), op, ": size ", v,
             " is too large for cuDNN's convolution API");
  return int(v);
}

std::unique_ptr<ConvPlan> make_descriptors(const ConvArgs& a, bool tf32) {
  const char* op = conv_dir_name(a.dir);
  auto plan = std::make_unique<ConvPlan>();
  cudnnDataType_t dt = dnn_dtype(a.x.dtype());
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->x));
  LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&plan->y));
  LOOM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&plan->w));
  LOOM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&plan->conv));
  for (const Tensor* t : {&a.x, &a.y, &a.w})
    LOOM_CHECK(t->numel() <= std::numeric_limits<int>::max(), op, ": tensor ", t->shape(),
               " has 2^31 or more elements, beyond cuDNN's convolution API");
  LOOM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x, CUDNN_TENSOR_NCHW, dt,
                                              as_int(op, a.x.size(0)), as_int(op, a.x.size(1)),
                                              as_int(op, a.x.size(2)), as_int(op, a.x.size(3))));
  LOOM_CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y, CUDNN_TENSOR_NCHW, dt,
                                              as_int(op, a.y.size(0)), as_int(op, a.y.size(1)),
                                              as_int(op, a.y.size(2)), as_int(op, a.y.size(3))));
  LOOM_CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w, dt, CUDNN_TENSOR_NCHW,
                                              as_int(op, a.w.size(0)), as_int(op, a.w.size(1)),
                                              as_int(op, a.w.size(2)), as_int(op, a.w.size(3))));
  cudnnDataType_t compute = a.x.dtype() == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  LOOM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
      plan->conv, as_int(op, a.p.padding[0]), as_int(op, a.p.padding[1]), as_int(op, a.p.stride[0]),
      as_int(op, a.p.stride[1]), as_int(op, a.p.dilation[0]), as_int(op, a.p.dilation[1]),
      CUDNN_CROSS_CORRELATION, compute));
  LOOM_CUDNN_CHECK(cudnnSetConvolutionGroupCount(plan->conv, as_int(op, a.p.groups)));
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  if (a.x.dtype() == DType::F32) math = tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  if (a.x.dtype() == DType::F16 || a.x.dtype() == DType::BF16) math = CUDNN_TENSOR_OP_MATH;
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(plan->conv, math));
  return plan;
}

// Workspace bytes algorithm `algo` needs, or nothing when it does not support this convolution.
bool workspace_of(cudnnHandle_t h, const ConvPlan& pl, ConvDir dir, int algo, size_t* bytes) {
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  switch (dir) {
    case ConvDir::Forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, pl.x, pl.w, pl.conv, pl.y,
                                                   cudnnConvolutionFwdAlgo_t(algo), bytes);
      break;
    case ConvDir::BackwardData:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, pl.w, pl.y, pl.conv, pl.x,
                                                        cudnnConvolutionBwdDataAlgo_t(algo), bytes);
      break;
    case ConvDir::BackwardFilter:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, pl.x, pl.y, pl.conv, pl.w, cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS;
}

int algo_count(ConvDir dir) {
  switch (dir) {
    case ConvDir::Forward:
      return int(CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
    case ConvDir::BackwardData:
      return int(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
    case ConvDir::BackwardFilter:
      return int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  }
  return 0;
}

// The first usable result (cuDNN sorts them fastest first). Strict float32 keeps FMA math.
template <typename Perf>
void pick(const ConvArgs& a, ConvPlan& pl, const Perf* perf, int n, size_t ws_limit,
          bool strict_f32) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > ws_limit) continue;
    pl.algo = int(perf[i].algo);
    pl.workspace = perf[i].memory;
    pl.ms = perf[i].time;
    if (!strict_f32) LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(pl.conv, perf[i].mathType));
    return;
  }
  LOOM_FAIL(conv_dir_name(a.dir), ": cuDNN found no algorithm for input ", a.x.shape(), ", weight ",
            a.w.shape(), ", output ", a.y.shape(), " (", dtype_name(a.x.dtype()), ", stride [",
            a.p.stride[0], ", ", a.p.stride[1], "], padding [", a.p.padding[0], ", ",
            a.p.padding[1], "], dilation [", a.p.dilation[0], ", ", a.p.dilation[1], "], groups ",
            a.p.groups, ")");
}

void choose_algorithm(const ConvArgs& a, ConvPlan& pl, cudnnHandle_t h, bool capturing,
                      bool strict_f32) {
  constexpr int kMaxAlgos = 16;
  int n = 0;
  if (capturing) {  // heuristics only: nothing may run or synchronise during a capture
    size_t limit = kMaxFindWorkspace;
    if (a.dir == ConvDir::Forward) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
      LOOM_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, pl.x, pl.w, pl.conv, pl.y,
                                                              kMaxAlgos, &n, perf));
      pick(a, pl, perf, n, limit, strict_f32);
    } else if (a.dir == ConvDir::BackwardData) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, pl.w, pl.y, pl.conv, pl.x,
                                                                   kMaxAlgos, &n, perf));
      pick(a, pl, perf, n, limit, strict_f32);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
      LOOM_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, pl.x, pl.y, pl.conv, pl.w,
                                                                     kMaxAlgos, &n, perf));
      pick(a, pl, perf, n, limit, strict_f32);
    }
    return;
  }
  // The workspace for Find: what the hungriest supported algorithm asks, within limits.
  size_t want = 0;
  for (int algo = 0; algo < algo_count(a.dir); ++algo) {
    size_t bytes = 0;
    if (workspace_of(h, pl, a.dir, algo, &bytes)) want = std::max(want, bytes);
  }
  size_t free_bytes = 0, total_bytes = 0;
  LOOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  size_t limit = std::min({want, kMaxFindWorkspace, free_bytes / 2});
  DataPtr ws;
  if (limit > 0) ws = allocator_for(a.x.device()).allocate(limit);
  void* out = conv_output(a).data_ptr();
  if (a.dir == ConvDir::Forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
    LOOM_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, pl.x, a.x.data_ptr(), pl.w,
                                                            a.w.data_ptr(), pl.conv, pl.y, out,
                                                            kMaxAlgos, &n, perf, ws.get(), limit));
    pick(a, pl, perf, n, limit, strict_f32);
  } else if (a.dir == ConvDir::BackwardData) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
    LOOM_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        h, pl.w, a.w.data_ptr(), pl.y, a.y.data_ptr(), pl.conv, pl.x, out, kMaxAlgos, &n, perf,
        ws.get(), limit));
    pick(a, pl, perf, n, limit, strict_f32);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
    LOOM_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        h, pl.x, a.x.data_ptr(), pl.y, a.y.data_ptr(), pl.conv, pl.w, out, kMaxAlgos, &n, perf,
        ws.get(), limit));
    pick(a, pl, perf, n, limit, strict_f32);
  }
}

ConvPlan& plan_for(const ConvArgs& a, cudnnHandle_t h, cudaStream_t stream) {
  DType dt = a.x.dtype();
  bool tf32 = dt == DType::F32 && allow_tf32();
  ConvKey key{a.x.device().index,
              int64_t(dt),
              tf32,
              int64_t(a.dir),
              a.x.size(0),
              a.x.size(1),
              a.x.size(2),
              a.x.size(3),
              a.w.size(0),
              a.w.size(1),
              a.w.size(2),
              a.w.size(3),
              a.y.size(2),
              a.y.size(3),
              a.p.stride[0],
              a.p.stride[1],
              a.p.padding[0],
              a.p.padding[1],
              a.p.dilation[0],
              a.p.dilation[1],
              a.p.groups,
              0,
              0,
              0};
  ConvCache& cache = conv_cache();
  std::lock_guard<std::mutex> lock(cache.mu);  // held through Find: one search per key
  auto it = cache.plans.find(key);
  if (it != cache.plans.end()) return *it->second;
  auto plan = make_descriptors(a, tf32);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  choose_algorithm(a, *plan, h, capture != cudaStreamCaptureStatusNone, dt == DType::F32 && !tf32);
  return *cache.plans.emplace(key, std::move(plan)).first->second;
}

}  // namespace

float classic_conv_ms(const ConvArgs& a) {
  int dev = a.x.device().index;
  DeviceGuard guard(dev);
  return plan_for(a, dnn_handle(dev), current_stream(dev)).ms;
}

void run_conv_legacy(const ConvArgs& a) {
  int dev = a.x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  cudnnHandle_t h = dnn_handle(dev);
  ConvPlan& pl = plan_for(a, h, stream);
  DataPtr ws;
  if (pl.workspace > 0) ws = allocator_for(a.x.device()).allocate(pl.workspace);
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
  bool f64 = a.x.dtype() == DType::F64;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  switch (a.dir) {
    case ConvDir::Forward:
      LOOM_CUDNN_CHECK(cudnnConvolutionForward(h, one, pl.x, a.x.data_ptr(), pl.w, a.w.data_ptr(),
                                               pl.conv, cudnnConvolutionFwdAlgo_t(pl.algo),
                                               ws.get(), pl.workspace, zero, pl.y, a.y.data_ptr()));
      break;
    case ConvDir::BackwardData:
      LOOM_CUDNN_CHECK(
          cudnnConvolutionBackwardData(h, one, pl.w, a.w.data_ptr(), pl.y, a.y.data_ptr(), pl.conv,
                                       cudnnConvolutionBwdDataAlgo_t(pl.algo), ws.get(),
                                       pl.workspace, zero, pl.x, a.x.data_ptr()));
      break;
    case ConvDir::BackwardFilter:
      LOOM_CUDNN_CHECK(
          cudnnConvolutionBackwardFilter(h, one, pl.x, a.x.data_ptr(), pl.y, a.y.data_ptr(),
                                         pl.conv, cudnnConvolutionBwdFilterAlgo_t(pl.algo),
                                         ws.get(), pl.workspace, zero, pl.w, a.w.data_ptr()));
      break;
  }
}

}  // namespace loom::cuda
