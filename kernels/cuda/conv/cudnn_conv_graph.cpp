// CUDA 2-d convolutions through cuDNN's graph (backend) API: one convolution node per operation
// graph, engine configurations from cuDNN's heuristics, autotuned on the real buffers on first
// use, and the finalized execution plan kept in loom's own cache. NCHW or channels-last tensors
// (NHWC data, KRSC filters, as strides), f32 (strict or TF32), f64, f16 and bf16.
// Leaves out: fused epilogues (bias, activation), engines that compile kernels at run time, and
// plans shared between threads (the cache is per thread, like the cuDNN handles it is built on).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/env_flag.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/conv/cudnn_conv.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/math_mode.h"
#include "kernels/cuda/plan_key.h"

namespace loom::cuda {

// Note [cuDNN plan cache]
// cuDNN 9 runs the classic cudnnConvolution* calls on top of this graph API and keeps only the
// plan of the previous call, so a network whose convolutions differ in shape rebuilds an
// execution plan (heuristics, engine checks, finalize) on every call. A wall-clock sample of the
// host thread during eager cnn bf16 steps on an H200 found 62% of it inside those rebuilds. Here
// each key (device, direction, dtype, math mode, sizes, strides, pointer alignment, parameters)
// builds its plan once; every later call only fills a variant pack (the three pointers and the
// workspace) and executes.
//
// Choosing the plan: heuristics mode A lists engine configurations best first and mode FALLBACK
// adds ones that always apply. Configurations whose numerical notes break loom's promises are
// dropped: tensor-core math or down-converted inputs on strict float32 (Note [Strict fp32]),
// reduced-precision accumulation on any type, and engines that compile kernels at run time
// (seconds on first use). Up to kMaxCandidates plans whose workspace fits are finalized, each is
// timed on the real buffers (best of two rounds) and the fastest is kept: the graph-API counterpart
// of cudnnFind*AlgorithmEx. For NCHW tensors the classic API's own Find runs too, and when its
// algorithm measured faster the key is handed to it. On an H200 the engines left for strict
// float32 were slower than the classic FMA algorithms (cnn fp32 step 1.84 against 1.69 ms), so
// strict float32 NCHW goes to the classic API without the graph search (which would only add to
// the first step); in bf16 the graph engines measured faster (with the plan cache, the cnn bf16
// step went from 1.48 to 1.13 ms eager and from 1.37 to 1.04 ms as one CUDA graph). Inside a CUDA
// graph capture nothing may run or synchronise, so a key first met there keeps the first plan that
// finalizes. A key no engine takes is remembered as such and goes to the classic API
// (cudnn_conv_legacy.cpp) too.

namespace {

constexpr int kMaxCandidates = 10;
constexpr size_t kMaxWorkspace = size_t(1) << 30;
constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';

void check(cudnnStatus_t st, const char* what, int64_t attr = -1) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  if (attr >= 0)
    LOOM_FAIL("cuDNN graph API: ", what, " (attribute ", attr,
              ") failed: ", cudnnGetErrorString(st), " (status ", int(st), ")");
  LOOM_FAIL("cuDNN graph API: ", what, " failed: ", cudnnGetErrorString(st), " (status ", int(st),
            ")");
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    check(cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor", int64_t(type));
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() { reset(); }

  cudnnBackendDescriptor_t get() const { return d_; }
  explicit operator bool() const { return d_ != nullptr; }

  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values,
            int64_t count = 1) {
    check(cudnnBackendSetAttribute(d_, name, type, count, values), "cudnnBackendSetAttribute",
          int64_t(name));
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &o);
  }
  Desc& finalize() {
    check(cudnnBackendFinalize(d_), "cudnnBackendFinalize");
    return *this;
  }
  bool try_finalize() { return cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS; }

 private:
  void reset() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

// The alignment cuDNN may assume for a pointer: the largest power of two up to 16 dividing it.
int64_t byte_alignment(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 16;
  while (align > 1 && a % uintptr_t(align) != 0) align /= 2;
  return align;
}

Desc tensor_desc(int64_t uid, const Tensor& t) {
  cudnnDataType_t dt = dnn_dtype(t.dtype());
  std::array<int64_t, 4> dims{}, strides{};
  for (int d = 0; d < 4; ++d) dims[d] = t.size(d), strides[d] = t.stride(d);
  int64_t align = byte_alignment(t.data_ptr());
  Desc desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  desc.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dt)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &align);
  return std::move(desc.finalize());
}

Desc conv_desc(DType dt, const Conv2dParams& p) {
  cudnnDataType_t compute = dt == DType::F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  int64_t spatial = 2;
  std::array<int64_t, 2> pad{p.padding[0], p.padding[1]}, stride{p.stride[0], p.stride[1]},
      dil{p.dilation[0], p.dilation[1]};
  Desc desc(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  desc.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride.data(), 2)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dil.data(), 2);
  return std::move(desc.finalize());
}

// The operation node of one direction: which descriptor type, which attribute names x/w/y.
struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
OpAttrs op_attrs(ConvDir d) {
  switch (d) {
    case ConvDir::Forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvDir::BackwardData:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvDir::BackwardFilter:
      break;
  }
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
}

// The operation graph of one convolution: y = conv(x, w), dx = conv^T(dy, w) or dw = (x, dy).
Desc op_graph(const ConvArgs& a, cudnnHandle_t h) {
  Desc x = tensor_desc(kUidX, a.x), w = tensor_desc(kUidW, a.w), y = tensor_desc(kUidY, a.y);
  Desc conv = conv_desc(a.x.dtype(), a.p);
  OpAttrs at = op_attrs(a.dir);
  Desc op(at.type);
  op.set(at.x, x).set(at.w, w).set(at.y, y).set(at.conv, conv);
  if (a.x.dtype() == DType::F64) {
    double one = 1, zero = 0;
    op.set(at.alpha, CUDNN_TYPE_DOUBLE, &one).set(at.beta, CUDNN_TYPE_DOUBLE, &zero);
  } else {
    float one = 1, zero = 0;
    op.set(at.alpha, CUDNN_TYPE_FLOAT, &one).set(at.beta, CUDNN_TYPE_FLOAT, &zero);
  }
  op.finalize();
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &h);
  return std::move(graph.finalize());
}

// The engine configurations heuristics `mode` proposes for `graph`, best first.
std::vector<Desc> engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (!heur.try_finalize()) return {};
  int64_t n = 0;
  if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                               nullptr) != CUDNN_STATUS_SUCCESS)
    return {};
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < n; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  if (n == 0 || cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                         raw.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  cfgs.resize(size_t(std::min(got, n)));
  return cfgs;
}

// Whether the engine behind `cfg` keeps loom's numerical promises (Note [cuDNN plan cache]).
// LOOM_CONV_PLAN_LOG=1: choose_plan prints each new key's candidates, their times and the one it
// keeps to stderr (how the plans in docs/perf.md were examined).
bool plan_log() {
  static const bool on = env_flag("LOOM_CONV_PLAN_LOG");
  return on;
}

// cuDNN's global index of the engine behind a configuration (-1 when it does not say).
int64_t engine_index(const Desc& cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0, index = -1;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                               &raw) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                               &index) != CUDNN_STATUS_SUCCESS)
    return -1;
  return index;
}

bool acceptable(const Desc& cfg, DType dt, bool tf32) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw) != CUDNN_STATUS_SUCCESS)
    return false;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> num{};
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> beh{};
  int64_t n_num = 0, n_beh = 0;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               int64_t(num.size()), &n_num, num.data()) != CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               int64_t(beh.size()), &n_beh, beh.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  bool strict_f32 = dt == DType::F32 && !tf32;
  for (int64_t i = 0; i < std::min<int64_t>(n_num, num.size()); ++i) {
    if (num[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
    if (strict_f32 && (num[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
                       num[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS))
      return false;
  }
  for (int64_t i = 0; i < std::min<int64_t>(n_beh, beh.size()); ++i)
    if (beh[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return false;
  return true;
}

struct Plan {
  Desc plan;  // empty: the classic API runs this convolution
  int64_t workspace = 0;
};

Plan finalize_plan(const Desc& cfg, cudnnHandle_t h) {
  Plan p{Desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR), 0};
  p.plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &h)
      .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  int64_t n = 0;
  if (!p.plan.try_finalize() ||
      cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, &n, &p.workspace) != CUDNN_STATUS_SUCCESS)
    return {};
  return p;
}

cudnnStatus_t execute(cudnnHandle_t h, const Plan& p, const ConvArgs& a, void* workspace) {
  std::array<int64_t, 3> uids{kUidX, kUidW, kUidY};
  std::array<void*, 3> ptrs{a.x.data_ptr(), a.w.data_ptr(), a.y.data_ptr()};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), 3)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), 3)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  pack.finalize();
  return cudnnBackendExecute(h, p.plan.get(), pack.get());
}

// Milliseconds per run of `p` on the real buffers (infinity when it fails to run).
float time_plan(cudnnHandle_t h, const Plan& p, const ConvArgs& a, void* ws, cudaStream_t s) {
  if (execute(h, p, a, ws) != CUDNN_STATUS_SUCCESS) return std::numeric_limits<float>::infinity();
  cudaEvent_t start, stop;
  LOOM_CUDA_CHECK(cudaEventCreate(&start));
  LOOM_CUDA_CHECK(cudaEventCreate(&stop));
  constexpr int kRuns = 3;
  LOOM_CUDA_CHECK(cudaEventRecord(start, s));
  bool ok = true;
  for (int i = 0; i < kRuns && ok; ++i) ok = execute(h, p, a, ws) == CUDNN_STATUS_SUCCESS;
  LOOM_CUDA_CHECK(cudaEventRecord(stop, s));
  LOOM_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ok ? ms / kRuns : std::numeric_limits<float>::infinity();
}

Plan choose_plan(const ConvArgs& a, cudnnHandle_t h, cudaStream_t stream, bool tf32, bool fastest) {
  // The classic API runs only NCHW tensors (channels-last would cost it two copies), and strict
  // float32 NCHW goes to it without a graph search (Note [cuDNN plan cache]).
  const bool nchw = a.x.is_contiguous() && a.w.is_contiguous() && a.y.is_contiguous();
  if (fastest && nchw && a.x.dtype() == DType::F32 && !tf32) return {};
  Desc graph = op_graph(a, h);
  std::vector<Desc> cfgs = engine_configs(graph, CUDNN_HEUR_MODE_A);
  for (Desc& c : engine_configs(graph, CUDNN_HEUR_MODE_FALLBACK)) cfgs.push_back(std::move(c));
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  bool capturing = capture != cudaStreamCaptureStatusNone;

  size_t free_bytes = 0, total_bytes = 0;
  if (!capturing) LOOM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  size_t limit = capturing ? kMaxWorkspace : std::min(kMaxWorkspace, free_bytes / 2);
  std::vector<Plan> plans;
  std::vector<int64_t> engines;  // for the log
  int rejected = 0;
  for (const Desc& cfg : cfgs) {
    if (int(plans.size()) == (capturing ? 1 : kMaxCandidates)) break;
    if (!acceptable(cfg, a.x.dtype(), tf32)) {
      ++rejected;
      continue;
    }
    Plan p = finalize_plan(cfg, h);
    if (p.plan && size_t(p.workspace) <= limit) {
      plans.push_back(std::move(p));
      if (plan_log()) engines.push_back(engine_index(cfg));
    }
  }
  if (plan_log())
    std::fprintf(stderr,
                 "conv plan: %s %s x %s w %s y %s: %zu configurations, %d rejected by notes, %zu "
                 "finalized\n",
                 a.dir == ConvDir::Forward        ? "fprop"
                 : a.dir == ConvDir::BackwardData ? "dgrad"
                                                  : "wgrad",
                 dtype_name(a.x.dtype()), describe(a.x).c_str(), describe(a.w).c_str(),
                 describe(a.y).c_str(), cfgs.size(), rejected, plans.size());
  if (plans.empty()) return {};
  if (capturing) return std::move(plans[0]);

  int64_t most = 0;
  for (const Plan& p : plans) most = std::max(most, p.workspace);
  DataPtr ws;
  if (most > 0) ws = allocator_for(a.x.device()).allocate(size_t(most));
  // Each plan is timed in kTimingRounds rounds over all of them and keeps its best time: a
  // single timing of a few tens of microseconds moved by up to 2x from one plan to the next on an
  // H200 (the first plans timed ran slowest), enough to keep a plan several times slower than
  // the best (Note [cuDNN plan cache]).
  constexpr int kTimingRounds = 2;
  std::vector<float> ms(plans.size(), std::numeric_limits<float>::infinity());
  for (int round = 0; round < kTimingRounds; ++round)
    for (size_t i = 0; i < plans.size(); ++i)
      ms[i] = std::min(ms[i], time_plan(h, plans[i], a, ws.get(), stream));
  size_t best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < plans.size(); ++i) {
    if (plan_log())
      std::fprintf(stderr, "  engine %ld: %.4f ms, workspace %ld bytes\n", long(engines[i]), ms[i],
                   long(plans[i].workspace));
    if (ms[i] < best_ms) best_ms = ms[i], best = i;
  }
  if (plan_log()) std::fprintf(stderr, "  kept engine %ld\n", long(engines[best]));
  if (!(best_ms < std::numeric_limits<float>::infinity())) return {};
  if (fastest && nchw) {
    float classic = classic_conv_ms(a);
    if (plan_log()) std::fprintf(stderr, "  classic API: %.4f ms\n", classic);
    if (classic >= 0 && classic < best_ms) return {};
  }
  return std::move(plans[best]);
}

// Everything a plan depends on: device, dtype, math mode, direction, whether the classic API may
// take it, sizes and strides of the three tensors, their pointers' alignment and the convolution's
// parameters.
using PlanKey = PlanKeyOf<40>;

PlanKey plan_key(const ConvArgs& a, bool tf32, bool fastest) {
  PlanKey k{};
  size_t i = 0;
  k[i++] = a.x.device().index;
  k[i++] = int64_t(a.x.dtype());
  k[i++] = tf32;
  k[i++] = int64_t(a.dir);
  k[i++] = fastest;
  for (const Tensor* t : {&a.x, &a.w, &a.y}) {
    for (int d = 0; d < 4; ++d) k[i++] = t->size(d);
    for (int d = 0; d < 4; ++d) k[i++] = t->stride(d);
    k[i++] = byte_alignment(t->data_ptr());
  }
  for (int d = 0; d < 2; ++d) {
    k[i++] = a.p.stride[d];
    k[i++] = a.p.padding[d];
    k[i++] = a.p.dilation[d];
  }
  return k;  // 5 + 27 + 6 = 38 entries used
}

using PlanCache = std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash>;
PlanCache& plan_cache() {
  thread_local auto* cache = new PlanCache();  // per thread, as the cuDNN handles; never freed
  return *cache;
}

}  // namespace

size_t graph_conv_plan_count() {
  size_t n = 0;
  for (const auto& [key, plan] : plan_cache()) n += plan->plan ? 1 : 0;
  return n;
}

bool run_conv_graph(const ConvArgs& a, bool fastest) {
  for (const Tensor* t : {&a.x, &a.w, &a.y})
    LOOM_CHECK(t->numel() <= std::numeric_limits<int32_t>::max(), conv_dir_name(a.dir), ": tensor ",
               t->shape(), " has 2^31 or more elements, beyond cuDNN's convolutions");
  int dev = a.x.device().index;
  DeviceGuard guard(dev);
  cudaStream_t stream = current_stream(dev);
  cudnnHandle_t h = dnn_handle(dev);
  bool tf32 = a.x.dtype() == DType::F32 && allow_tf32();
  PlanCache& cache = plan_cache();
  PlanKey key = plan_key(a, tf32, fastest);
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto plan = std::make_unique<Plan>();
    try {
      *plan = choose_plan(a, h, stream, tf32, fastest);
    } catch (const Error&) {
      // A descriptor this cuDNN refuses (a layout or parameter its graph API lacks): no plan,
      // and the caller takes the classic API, which reports what is wrong if it fails too.
    }
    it = cache.emplace(key, std::move(plan)).first;
  }
  const Plan& p = *it->second;
  if (!p.plan) return false;
  DataPtr ws;
  if (p.workspace > 0) ws = allocator_for(a.x.device()).allocate(size_t(p.workspace));
  cudnnStatus_t st = execute(h, p, a, ws.get());
  LOOM_CHECK(st == CUDNN_STATUS_SUCCESS, conv_dir_name(a.dir),
             ": cuDNN failed to run the plan for input ", a.x.shape(), ", weight ", a.w.shape(),
             ", output ", a.y.shape(), " (", dtype_name(a.x.dtype()),
             "): ", cudnnGetErrorString(st));
  return true;
}

}  // namespace loom::cuda
