// GPU microbenchmarks, each a ratio against the ceiling or library called directly in the same
// run: contiguous f32 add against a device-to-device cudaMemcpy (bandwidth), 4096^3 matmul (f32
// strict and bf16) against cuBLASLt and cuBLAS called directly, the cnn workload's convolutions
// (batch 256, all three directions) against cuDNN's fastest algorithm called directly (and, in
// bf16, loom's channels-last convolutions against its NCHW ones), the cnn's batch norms (with their
// fused ReLU) and max poolings against the memory floor of the bytes they must move, and the
// caching allocator's alloc/free pairs, and the classifier's cross-entropy with its gradient in
// one pass against two kernels. Times are medians of repeats measured with CUDA events
// after warm-up, on random (never zero) inputs.
//   ./build/benchmarks/bench_gpu_kernels [--quick] [--only "cross-entropy"]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/library_check.h"
#include "kernels/cuda/math_mode.h"

using namespace loom;

namespace {

Device dev0() { return Device(DeviceType::CUDA, 0); }
cudaStream_t stream() { return cuda::current_stream(0); }
bool g_quick = false;
double g_copy_gbs = 0;  // the device-to-device copy's bandwidth, measured by bench_add

// Median milliseconds per call of f: warm-up, then `reps` event-timed batches of `iters` calls.
double time_ms(const std::function<void()>& f, int iters, int reps = 7) {
  if (g_quick) reps = 3;
  for (int i = 0; i < 3; ++i) f();
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream()));
  cuda::Event start(true), end(true);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    start.record(stream());
    for (int i = 0; i < iters; ++i) f();
    end.record(stream());
    end.synchronize();
    t.push_back(double(start.elapsed_ms(end)) / iters);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string name, loom, ref, ratio, target;
  bool ok;
};
std::vector<Row> g_rows;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// ratio = loom time / reference time (lower is better); ok when within `slack` of 1.
void add_time_row(const std::string& name, double loom_ms, double ref_ms,
                  const std::string& unit_note, double slack = 1.05) {
  double ratio = loom_ms / ref_ms;
  g_rows.push_back({name, fmt("%.4f ms", loom_ms), fmt("%.4f ms", ref_ms) + unit_note,
                    fmt("%.3f", ratio), fmt("<= %.2f", slack), ratio <= slack});
}

// ---------------------------------------------------------------- elementwise add vs copy
void bench_add() {
  const int64_t n =
      g_quick ? (int64_t(1) << 26) : (int64_t(1) << 28);  // 256 MiB or 1 GiB per f32 tensor
  Tensor a = randn({n}, {.device = dev0()}), b = randn({n}, {.device = dev0()});
  Tensor dst = empty({n}, {.device = dev0()});
  auto& be = cuda::cuda_backend();
  double copy_ms = time_ms(
      [&] {
        LOOM_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), a.data_ptr(), size_t(n) * 4,
                                        cudaMemcpyDeviceToDevice, stream()));
      },
      10);
  double add_ms = time_ms([&] { be.binary(BinaryOp::Add, a, b); }, 10);
  double copy_gbs = 2.0 * n * 4 / copy_ms / 1e6, add_gbs = 3.0 * n * 4 / add_ms / 1e6;
  g_copy_gbs = copy_gbs;
  double pct = 100 * add_gbs / copy_gbs;
  g_rows.push_back({"add f32 " + std::to_string(n >> 20) + "M elems (GB/s, r+w)",
                    fmt("%.0f GB/s", add_gbs), fmt("%.0f GB/s (D2D copy)", copy_gbs),
                    fmt("%.1f%%", pct), ">= 80%", pct >= 80});
}

// ---------------------------------------------------------------- matmul
// C (n x n) = A B through cuBLASLt called directly, the best heuristic algorithm, 32 MiB workspace.
struct DirectLt {
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t l{};
  cublasLtMatmulAlgo_t algo{};
  size_t ws_size = 0;
  void* ws = nullptr;
  cudaDataType_t type;
  DirectLt(int64_t n, cudaDataType_t t, cublasComputeType_t compute) : type(t) {
    LOOM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, uint64_t(n), uint64_t(n), n));
    cublasLtMatmulPreference_t pref;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t max_ws = cuda::kLtMaxWorkspaceBytes;
    LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)));
    cublasLtMatmulHeuristicResult_t res{};
    int found = 0;
    LOOM_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(cuda::lt_handle(0), op, l, l, l, l, pref, 1, &res, &found));
    LOOM_CHECK(found > 0, "bench: no cuBLASLt algorithm");
    cublasLtMatmulPreferenceDestroy(pref);
    algo = res.algo;
    ws_size = res.workspaceSize;
    if (ws_size) LOOM_CUDA_CHECK(cudaMalloc(&ws, ws_size));
  }
  ~DirectLt() {
    if (ws) cudaFree(ws);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(op);
  }
  void run(const void* A, const void* B, void* C) {
    float one = 1, zero = 0;
    LOOM_CUBLAS_CHECK(cublasLtMatmul(cuda::lt_handle(0), op, &one, A, l, B, l, &zero, C, l, C, l,
                                     &algo, ws, ws_size, stream()));
  }
};

void bench_matmul(cublasHandle_t blas) {
  const int64_t n = 4096;
  const double flops = 2.0 * n * n * n;
  auto& be = cuda::cuda_backend();
  for (DType dt : {DType::F32, DType::BF16}) {
    Tensor a = randn({n, n}, {.device = dev0()}).to(dt),
           b = randn({n, n}, {.device = dev0()}).to(dt);
    Tensor c = empty({n, n}, {.dtype = dt, .device = dev0()});
    cudaDataType_t t = dt == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
    int iters = dt == DType::F32 ? 10 : 50;
    double loom_ms = time_ms([&] { be.mm(a, b); }, iters);
    DirectLt lt(n, t, CUBLAS_COMPUTE_32F);
    double lt_ms = time_ms([&] { lt.run(b.data_ptr(), a.data_ptr(), c.data_ptr()); }, iters);
    float one = 1, zero = 0;
    double gemm_ms = time_ms(
        [&] {
          LOOM_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n),
                                         &one, b.data_ptr(), t, int(n), a.data_ptr(), t, int(n),
                                         &zero, c.data_ptr(), t, int(n), CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT));
        },
        iters);
    double best = std::min(lt_ms, gemm_ms);
    std::string name = std::string("mm 4096^3 ") + (dt == DType::F32 ? "f32 strict" : "bf16");
    add_time_row(name, loom_ms, best, lt_ms <= gemm_ms ? " cublasLt" : " cublasGemmEx");
    g_rows.back().loom += fmt(" %.0f TF/s", flops / loom_ms / 1e9);
    g_rows.back().ref += fmt(" %.0f TF/s", flops / best / 1e9);
  }
}

// ---------------------------------------------------------------- conv2d (cnn workload, batch 256)
struct ConvLayer {
  const char* name;
  int64_t C, H, K;  // 3x3, padding 1, stride 1, square H x H
};

// cuDNN called directly: descriptors, the fastest algorithm by cudnnFind*Ex, and a timed call.
struct DirectConv {
  cudnnHandle_t h;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  void* ws = nullptr;
  size_t ws_size = 0;
  DirectConv(const ConvLayer& L, int64_t N, cudnnDataType_t dt, cudnnMathType_t math) {
    LOOM_CUDNN_CHECK(cudnnCreate(&h));
    LOOM_CUDNN_CHECK(cudnnSetStream(h, stream()));
    LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    LOOM_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    LOOM_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    LOOM_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    LOOM_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, dt, int(N), int(L.C), int(L.H), int(L.H)));
    LOOM_CUDNN_CHECK(
        cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, dt, int(N), int(L.K), int(L.H), int(L.H)));
    LOOM_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w, dt, CUDNN_TENSOR_NCHW, int(L.K), int(L.C), 3, 3));
    LOOM_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, 1, 1, 1, 1, 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
    ws_size = size_t(512) << 20;
    LOOM_CUDA_CHECK(cudaMalloc(&ws, ws_size));
  }
  ~DirectConv() {
    cudaFree(ws);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroy(h);
  }
};

// One layer of bench_conv at one dtype: the operands, loom's parameters and cuDNN's own setup.
struct ConvCase {
  const ConvLayer& L;
  DType dt;
  const char* dn;        // "f32" or "bf16"
  cudnnMathType_t math;  // the descriptor's math type, restored after each search
  Conv2dParams p;
  Tensor x, w, gy, out_y, out_x, out_w;
  DirectConv& d;
  const int it = 20;
  float one = 1, zero = 0;
};

// cuDNN's fastest algorithm (its own search) for one pass, with the math type it asks for.
template <typename Perf>
auto fastest(ConvCase& c, const Perf* perf, int n, const char* pass) {
  LOOM_CHECK(n > 0 && perf[0].status == CUDNN_STATUS_SUCCESS, "bench: no cuDNN ", pass,
             " algorithm");
  if (c.dt != DType::F32) LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(c.d.conv, perf[0].mathType));
  return perf[0].algo;
}

// One pass timed: cuDNN's fastest algorithm for it (find(perf, n) runs cuDNN's search), run by
// theirs(algo), against loom's ours(), as the row "<layer> <row> <dtype>"; then the descriptor's
// math type is restored.
template <typename Perf, typename Find, typename Theirs, typename Ours>
void time_pass(ConvCase& c, const char* pass, const char* row, const Find& find,
               const Theirs& theirs, const Ours& ours) {
  Perf perf[16];
  int n = 0;
  find(perf, n);
  auto algo = fastest(c, perf, n, pass);
  double ref = time_ms([&] { theirs(algo); }, c.it);
  add_time_row(std::string(c.L.name) + " " + row + " " + c.dn, time_ms(ours, c.it), ref, "");
  LOOM_CUDNN_CHECK(cudnnSetConvolutionMathType(c.d.conv, c.math));
}

void conv_forward(ConvCase& c, cuda::CudaBackend& be) {
  DirectConv& d = c.d;
  time_pass<cudnnConvolutionFwdAlgoPerf_t>(
      c, "forward", "fwd",
      [&](auto* perf, int& n) {
        LOOM_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            d.h, d.x, c.x.data_ptr(), d.w, c.w.data_ptr(), d.conv, d.y, c.out_y.data_ptr(), 16, &n,
            perf, d.ws, d.ws_size));
      },
      [&](auto algo) {
        LOOM_CUDNN_CHECK(cudnnConvolutionForward(d.h, &c.one, d.x, c.x.data_ptr(), d.w,
                                                 c.w.data_ptr(), d.conv, algo, d.ws, d.ws_size,
                                                 &c.zero, d.y, c.out_y.data_ptr()));
      },
      [&] { be.conv2d(c.x, c.w, c.p); });
}

void conv_backward_data(ConvCase& c, cuda::CudaBackend& be) {
  DirectConv& d = c.d;
  time_pass<cudnnConvolutionBwdDataAlgoPerf_t>(
      c, "backward-data", "bwd-data",
      [&](auto* perf, int& n) {
        LOOM_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            d.h, d.w, c.w.data_ptr(), d.y, c.gy.data_ptr(), d.conv, d.x, c.out_x.data_ptr(), 16, &n,
            perf, d.ws, d.ws_size));
      },
      [&](auto algo) {
        LOOM_CUDNN_CHECK(cudnnConvolutionBackwardData(d.h, &c.one, d.w, c.w.data_ptr(), d.y,
                                                      c.gy.data_ptr(), d.conv, algo, d.ws,
                                                      d.ws_size, &c.zero, d.x, c.out_x.data_ptr()));
      },
      [&] { be.conv2d_backward_input(c.gy, c.w, c.x.shape(), c.p); });
}

void conv_backward_filter(ConvCase& c, cuda::CudaBackend& be) {
  DirectConv& d = c.d;
  time_pass<cudnnConvolutionBwdFilterAlgoPerf_t>(
      c, "backward-filter", "bwd-filter",
      [&](auto* perf, int& n) {
        LOOM_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            d.h, d.x, c.x.data_ptr(), d.y, c.gy.data_ptr(), d.conv, d.w, c.out_w.data_ptr(), 16, &n,
            perf, d.ws, d.ws_size));
      },
      [&](auto algo) {
        LOOM_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
            d.h, &c.one, d.x, c.x.data_ptr(), d.y, c.gy.data_ptr(), d.conv, algo, d.ws, d.ws_size,
            &c.zero, d.w, c.out_w.data_ptr()));
      },
      [&] { be.conv2d_backward_weight(c.gy, c.x, c.w.shape(), c.p); });
}

// bf16 channels-last (NHWC data, KRSC filter) against loom's own NCHW on the same values:
// whether carrying that layout through the network would pay (Note [Convolution layouts]).
void conv_channels_last(ConvCase& c, cuda::CudaBackend& be) {
  auto cl = [](const Tensor& t) {
    return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  };
  const Tensor &x = c.x, &w = c.w, &gy = c.gy;
  const Conv2dParams& p = c.p;
  Tensor xc = cl(x), wc = cl(w), gyc = cl(gy);
  std::string n = std::string(c.L.name) + " bf16 NHWC/NCHW ";
  const std::string note = " loom NCHW";
  add_time_row(n + "fwd", time_ms([&] { be.conv2d(xc, wc, p); }, c.it),
               time_ms([&] { be.conv2d(x, w, p); }, c.it), note);
  add_time_row(n + "bwd-data",
               time_ms([&] { be.conv2d_backward_input(gyc, wc, x.shape(), p); }, c.it),
               time_ms([&] { be.conv2d_backward_input(gy, w, x.shape(), p); }, c.it), note);
  add_time_row(n + "bwd-filter",
               time_ms([&] { be.conv2d_backward_weight(gyc, xc, w.shape(), p); }, c.it),
               time_ms([&] { be.conv2d_backward_weight(gy, x, w.shape(), p); }, c.it), note);
}

void bench_conv() {
  const int64_t N = 256;
  const ConvLayer layers[] = {{"conv1 1->32 28x28", 1, 28, 32},
                              {"conv2 32->64 28x28", 32, 28, 64},
                              {"conv3 64->128 14x14", 64, 14, 128}};
  auto& be = cuda::cuda_backend();
  for (DType dt : {DType::F32, DType::BF16}) {
    cudnnDataType_t cdt = dt == DType::F32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16;
    cudnnMathType_t math = dt == DType::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
    for (const ConvLayer& L : layers) {
      DirectConv d(L, N, cdt, math);
      Tensor x = randn({N, L.C, L.H, L.H}, {.device = dev0()}).to(dt);
      Tensor w = (randn({L.K, L.C, 3, 3}, {.device = dev0()}) * 0.1).to(dt);
      Tensor gy = randn({N, L.K, L.H, L.H}, {.device = dev0()}).to(dt);
      ConvCase c{L,
                 dt,
                 dt == DType::F32 ? "f32" : "bf16",
                 math,
                 Conv2dParams{},
                 x,
                 w,
                 gy,
                 empty(gy.shape(), {.dtype = dt, .device = dev0()}),
                 empty(x.shape(), {.dtype = dt, .device = dev0()}),
                 empty(w.shape(), {.dtype = dt, .device = dev0()}),
                 d};
      c.p.padding = {1, 1};
      conv_forward(c, be);
      conv_backward_data(c, be);
      conv_backward_filter(c, be);
      if (dt == DType::BF16) conv_channels_last(c, be);
    }
  }
}

// ---------------------------------------------------------------- batch norm and max pooling
// The cnn's memory-bound layers at batch 256, float32 NCHW as in its fp32 step: each against the
// time its unavoidable bytes take at the copy bandwidth bench_add measured (each input read once,
// each output written once). Batch norm runs in training mode with its fused ReLU; its backward
// reads grad_y and x (the ReLU's mask is recomputed from x: Note [ReLU mask from x]) and writes
// grad_x. Max pooling is
// 2 x 2, stride 2, with int64 indices. The ratio says how far each kernel sequence is from its
// floor (batch norm's forward reads x twice: statistics, then the normalising pass).
void bench_norm_pool() {
  auto& be = cuda::cuda_backend();
  const int it = g_quick ? 5 : 20;
  const double copy_bytes_per_ms = g_copy_gbs * 1e6;
  auto add_floor_row = [&](const std::string& name, double ms, double bytes) {
    double floor_ms = bytes / copy_bytes_per_ms;
    g_rows.push_back({name, fmt("%.4f ms", ms), fmt("%.4f ms (bytes at copy speed)", floor_ms),
                      fmt("%.3f", ms / floor_ms), "(report)", true});
  };
  struct Layer {
    const char* name;
    Shape x;
  };
  for (const Layer& L :
       {Layer{"bn1 32x28x28", {256, 32, 28, 28}}, Layer{"bn2 64x28x28", {256, 64, 28, 28}},
        Layer{"bn3 128x14x14", {256, 128, 14, 14}}}) {
    const int64_t C = L.x[1];
    Tensor x = randn(L.x, {.device = dev0()}), gy = randn(L.x, {.device = dev0()});
    Tensor w = rand({C}, {.device = dev0()}) + 0.5, b = randn({C}, {.device = dev0()});
    Tensor rm = zeros({C}, {.device = dev0()}), rv = ones({C}, {.device = dev0()});
    BatchNormOut out = be.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, true);
    const double n_bytes = double(x.numel()) * 4;
    add_floor_row(std::string(L.name) + " bn+relu fwd f32",
                  time_ms([&] { be.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, true); }, it),
                  2 * n_bytes);
    add_floor_row(
        std::string(L.name) + " bn+relu bwd f32",
        time_ms([&] { be.batch_norm_backward(gy, x, w, b, out.save_mean, out.save_invstd, out.y); },
                it),
        3 * n_bytes);
  }
  for (const Layer& L :
       {Layer{"pool1 64x28x28", {256, 64, 28, 28}}, Layer{"pool2 128x14x14", {256, 128, 14, 14}}}) {
    Tensor x = randn(L.x, {.device = dev0()});
    Pool2dParams p;  // 2 x 2, stride 2
    TensorPair vi = be.max_pool2d(x, p);
    Tensor gy = randn(vi.first.shape(), {.device = dev0()});
    const double in_bytes = double(x.numel()) * 4, out_bytes = double(vi.first.numel()) * (4 + 8);
    add_floor_row(std::string(L.name) + " maxpool fwd f32",
                  time_ms([&] { be.max_pool2d(x, p); }, it), in_bytes + out_bytes);
    add_floor_row(std::string(L.name) + " maxpool bwd f32",
                  time_ms([&] { be.max_pool2d_backward(gy, vi.second, x.shape(), p); }, it),
                  in_bytes + out_bytes);
  }
}

// ---------------------------------------------------------------- the classifier's loss
// GPT-2's logits (16384 x 50304 bfloat16): cross_entropy_with_grad_'s one pass (Note
// [Cross-entropy and its gradient in one pass]) against the forward and backward kernels it
// replaces, and against the memory floor (the logits read once and written once).
void bench_cross_entropy() {
  auto& be = cuda::cuda_backend();
  const int64_t N = g_quick ? 4096 : 16384, C = 50304;
  Tensor logits = (randn({N, C}, {.device = dev0()}) * 2.0).to(DType::BF16);
  Tensor target = randint(0, C, {N}, {.dtype = DType::I64, .device = dev0()});
  Tensor work = logits.clone();
  const int it = g_quick ? 3 : 10;
  // Each call overwrites `work` with a gradient: refreshed from the logits outside the timing
  // would cost as much again, so both rows time the call on whatever `work` holds (finite).
  const double one =
      time_ms([&] { be.cross_entropy_with_grad_(work, target, Reduction::Mean, 0.0, -100); }, it);
  const double two = time_ms(
      [&] { cross_entropy_with_grad_composed(be, work, target, Reduction::Mean, 0.0, -100); }, it);
  add_time_row("cross_entropy_with_grad_ 16384x50304 bf16", one, two, " (two kernels)", 1.0);
  const double floor_ms = 2.0 * double(N * C) * 2 / (g_copy_gbs * 1e6);
  g_rows.push_back({"  the same against its memory floor", fmt("%.4f ms", one),
                    fmt("%.4f ms (bytes at copy speed)", floor_ms), fmt("%.3f", one / floor_ms),
                    "(report)", true});
}

// ---------------------------------------------------------------- allocator
void bench_allocator() {
  const int pairs = g_quick ? 100000 : 1000000;
  Allocator& alloc = allocator_for(dev0());
  // Mixed sizes, log-uniform from 256 B to 32 MiB, with up to 16 blocks alive at once.
  std::mt19937_64 rng(42);
  std::vector<size_t> sizes(4096);
  for (size_t& s : sizes)
    s = size_t(256.0 * std::pow(2.0, std::uniform_real_distribution<double>(0, 17)(rng)));
  std::vector<DataPtr> live(16);
  for (int i = 0; i < 1000; ++i)
    live[size_t(i) % 16] = alloc.allocate(sizes[size_t(i) % sizes.size()]);  // warm
  for (auto& p : live) p.reset();
  LOOM_CUDA_CHECK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i)
    live[size_t(i) % 16] = alloc.allocate(sizes[size_t(i) % sizes.size()]);
  for (auto& p : live) p.reset();
  auto t1 = std::chrono::steady_clock::now();
  double ns_pair = std::chrono::duration<double, std::nano>(t1 - t0).count() / pairs;
  // The same pattern through cudaMalloc/cudaFree (fewer pairs: they are slow).
  const int raw_pairs = 2000;
  std::vector<void*> raw(16, nullptr);
  auto t2 = std::chrono::steady_clock::now();
  for (int i = 0; i < raw_pairs; ++i) {
    void*& slot = raw[size_t(i) % 16];
    if (slot) LOOM_CUDA_CHECK(cudaFree(slot));
    LOOM_CUDA_CHECK(cudaMalloc(&slot, sizes[size_t(i) % sizes.size()]));
  }
  for (void* p : raw)
    if (p) LOOM_CUDA_CHECK(cudaFree(p));
  auto t3 = std::chrono::steady_clock::now();
  double raw_ns = std::chrono::duration<double, std::nano>(t3 - t2).count() / raw_pairs;
  g_rows.push_back({"allocator " + std::to_string(pairs) + " alloc/free pairs, 256 B..32 MiB",
                    fmt("%.0f ns/pair", ns_pair), fmt("%.0f ns/pair (cudaMalloc+cudaFree)", raw_ns),
                    fmt("%.4f", ns_pair / raw_ns), "(report)", true});
}

void print_table() {
  std::printf("\n%-46s %-22s %-36s %-8s %-8s %s\n", "benchmark", "loom", "reference", "ratio",
              "target", "");
  std::printf("%s\n", std::string(130, '-').c_str());
  int fails = 0;
  for (const Row& r : g_rows) {
    std::printf("%-46s %-22s %-36s %-8s %-8s %s\n", r.name.c_str(), r.loom.c_str(), r.ref.c_str(),
                r.ratio.c_str(), r.target.c_str(), r.ok ? "ok" : "MISS");
    fails += r.ok ? 0 : 1;
  }
  std::printf("%d of %zu rows meet their target\n", int(g_rows.size()) - fails, g_rows.size());
}

}  // namespace

static int run_all(int argc, char** argv) {
  std::string only;  // --only NAME: that step alone (after "add", which measures the copy speed)
  for (int i = 1; i < argc; ++i) {
    g_quick = g_quick || std::strcmp(argv[i], "--quick") == 0;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
  }
  if (!cuda::is_available()) {
    std::printf("bench_gpu_kernels: no CUDA device, nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop{};
  LOOM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s, %d SMs, %.0f GiB; TF32 %s\n", prop.name, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1 << 30),
              cuda::allow_tf32() ? "allowed" : "off (strict fp32)");
  cublasHandle_t blas;
  LOOM_CUBLAS_CHECK(cublasCreate(&blas));
  LOOM_CUBLAS_CHECK(cublasSetStream(blas, stream()));
  LOOM_CUBLAS_CHECK(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH));  // no TF32
  struct Step {
    const char* name;
    std::function<void()> run;
  };
  for (const Step& s :
       {Step{"add", bench_add}, Step{"matmul", [&] { bench_matmul(blas); }},
        Step{"conv", bench_conv}, Step{"norm and pool", bench_norm_pool},
        Step{"cross-entropy", bench_cross_entropy}, Step{"allocator", bench_allocator}}) {
    if (!only.empty() && only != s.name && std::string(s.name) != "add") continue;
    std::printf("running %s ...\n", s.name);
    std::fflush(stdout);
    s.run();
  }
  cublasDestroy(blas);
  print_table();
  return 0;
}

// Any error (a CUDA call that fails, a loom::Error) ends the program with one line and exit code 1.
int main(int argc, char** argv) {
  try {
    return run_all(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpu_kernels: error: %s\n", e.what());
    return 1;
  }
}
