// bench_train_torch: the libtorch twin of benchmarks/bench_train.cpp. The same workloads (mlp,
// cnn, wide; docs/workloads.md), batch sizes, initialisation scale (PyTorch's defaults, which
// loom's nn::init copies), Adam(lr 1e-3), random inputs already on the device, strict fp32 (TF32
// off in cuBLAS and cuDNN) or bf16 autocast, and the same timing protocol: warm up, then time
// `steps` steps `repeats` times, synchronising the device around each repeat, and report the
// median, min and max ms/step, the peak device memory and the time from process start to the end
// of the first step. The output line has the same columns as bench_train's, so
// scripts/bench-compare.sh can join the two.
// Leaves out: CUDA graphs (libtorch's C++ API has torch::cuda::CUDAGraph, but PyTorch's whole-step
// capture needs the Python side's optimizer support; the graph rows are loom-only).
//
//   ./build/benchmarks/libtorch/bench_train_torch --workload mlp --device cuda
//   ./build/benchmarks/libtorch/bench_train_torch --workload all --device cpu --steps 10 --repeats
//   3
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef LOOM_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kProcessStart = Clock::now();  // as close to process start as C++ allows

// ---- the three workload models (docs/workloads.md) ----
torch::nn::Sequential mlp() {
  return torch::nn::Sequential(torch::nn::Flatten(), torch::nn::Linear(784, 1024),
                               torch::nn::ReLU(), torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
                               torch::nn::Linear(1024, 10));
}

void conv_bn_relu(torch::nn::Sequential& s, int64_t in, int64_t out) {
  s->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  s->push_back(torch::nn::BatchNorm2d(out));
  s->push_back(torch::nn::ReLU());
}

torch::nn::Sequential cnn() {
  torch::nn::Sequential s;
  conv_bn_relu(s, 1, 32);
  conv_bn_relu(s, 32, 64);
  s->push_back(torch::nn::MaxPool2d(2));
  conv_bn_relu(s, 64, 128);
  s->push_back(torch::nn::MaxPool2d(2));
  s->push_back(torch::nn::AdaptiveAvgPool2d(1));
  s->push_back(torch::nn::Flatten());
  s->push_back(torch::nn::Linear(128, 10));
  return s;
}

torch::nn::Sequential wide() {
  torch::nn::Sequential s(torch::nn::Flatten(), torch::nn::Linear(784, 4096), torch::nn::ReLU());
  for (int i = 0; i < 7; ++i) {
    s->push_back(torch::nn::Linear(4096, 4096));
    s->push_back(torch::nn::ReLU());
  }
  s->push_back(torch::nn::Linear(4096, 10));
  return s;
}

// Turns bf16 autocast on or off for the device type: what `with torch.autocast(...)` does from
// Python. The C++ switch changed names in PyTorch 2.4 (Debian's libtorch is 1.13).
void set_bf16_autocast(const torch::Device& d, bool on) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(d.type(), on);
  if (on) at::autocast::set_autocast_dtype(d.type(), torch::kBFloat16);
#else
  if (d.is_cuda()) {
    at::autocast::set_enabled(on);
    if (on) at::autocast::set_autocast_gpu_dtype(torch::kBFloat16);
  } else {
    at::autocast::set_cpu_enabled(on);
    if (on) at::autocast::set_autocast_cpu_dtype(torch::kBFloat16);
  }
#endif
  if (!on) at::autocast::clear_cache();
}

struct Workload {
  const char* name;
  int64_t batch;
  torch::nn::Sequential (*make)();
};

void synchronize(const torch::Device& d) {
#ifdef LOOM_TORCH_CUDA
  if (d.is_cuda()) torch::cuda::synchronize(d.index());
#endif
  (void)d;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Result {
  double median_ms = 0, min_ms = 0, max_ms = 0, peak_mib = 0, first_step_s = 0;
};

Result run(const Workload& w, const torch::Device& dev, bool bf16, int warmup, int steps,
           int repeats) {
  torch::manual_seed(0);
  auto model = w.make();
  model->to(dev);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  torch::Tensor x = torch::randn({w.batch, 1, 28, 28}, torch::TensorOptions().device(dev));
  torch::Tensor y =
      torch::randint(0, 10, {w.batch}, torch::TensorOptions().dtype(torch::kLong).device(dev));

  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss;
    if (bf16) {
      set_bf16_autocast(dev, true);
      loss = torch::nn::functional::cross_entropy(model->forward(x), y);
      set_bf16_autocast(dev, false);
    } else {
      loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    }
    loss.backward();
    opt.step();
  };

  Result r;
  step();
  synchronize(dev);
  r.first_step_s = seconds_since(kProcessStart);
  for (int i = 1; i < warmup; ++i) step();
#ifdef LOOM_TORCH_CUDA
  if (dev.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index());
#endif
  std::vector<double> ms;
  for (int rep = 0; rep < repeats; ++rep) {
    synchronize(dev);
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    synchronize(dev);
    ms.push_back(seconds_since(t0) * 1e3 / steps);
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  r.min_ms = ms.front();
  r.max_ms = ms.back();
#ifdef LOOM_TORCH_CUDA
  if (dev.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index());
    r.peak_mib = double(stats.allocated_bytes[0].peak) / (1 << 20);  // [0]: all pools
  }
#endif
  return r;
}

int positive(const char* flag, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v <= 0 || v > 1000000) {
    std::fprintf(stderr, "bench_train_torch: %s needs an integer in [1, 1000000], got '%s'\n", flag,
                 value);
    std::exit(2);
  }
  return int(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "all", device, dtype = "fp32";
  int warmup = 10, steps = 50, repeats = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--workload" && has_value)
      workload = argv[++i];
    else if (a == "--device" && has_value)
      device = argv[++i];
    else if (a == "--dtype" && has_value)
      dtype = argv[++i];
    else if (a == "--warmup" && has_value)
      warmup = positive("--warmup", argv[++i]);
    else if (a == "--steps" && has_value)
      steps = positive("--steps", argv[++i]);
    else if (a == "--repeats" && has_value)
      repeats = positive("--repeats", argv[++i]);
    else {
      std::fprintf(
          stderr,
          "usage: bench_train_torch [--workload mlp|cnn|wide|all] [--device cpu|cuda|cuda:N] "
          "[--dtype fp32|bf16] [--warmup N] [--steps N] [--repeats N]\n(bad argument '%s')\n",
          a.c_str());
      return 2;
    }
  }
  if (workload != "all" && workload != "mlp" && workload != "cnn" && workload != "wide") {
    std::fprintf(stderr, "bench_train_torch: --workload must be mlp, cnn, wide or all, got '%s'\n",
                 workload.c_str());
    return 2;
  }
  if (dtype != "fp32" && dtype != "bf16") {
    std::fprintf(stderr, "bench_train_torch: --dtype must be fp32 or bf16, got '%s'\n",
                 dtype.c_str());
    return 2;
  }
  try {
    if (device.empty()) device = torch::cuda::is_available() ? "cuda" : "cpu";
    torch::Device dev(device);
    // "cuda" has no index (-1), which the caching allocator's statistics calls reject: name it.
    if (dev.is_cuda() && !dev.has_index()) dev = torch::Device(torch::kCUDA, 0);
    // Strict fp32: no TF32 in cuBLAS or cuDNN (the default for convolutions is on).
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setBenchmarkCuDNN(true);
    std::vector<Workload> all = {{"mlp", 256, &mlp}, {"cnn", 256, &cnn}, {"wide", 2048, &wide}};
    std::printf("%-6s %-8s %-6s %-6s %6s %10s %10s %10s %10s %12s\n", "model", "device", "dtype",
                "mode", "batch", "ms/step", "min ms", "max ms", "peak MiB", "first step s");
    for (const Workload& w : all) {
      if (workload != "all" && workload != w.name) continue;
      Result r = run(w, dev, dtype == "bf16", warmup, steps, repeats);
      std::printf("%-6s %-8s %-6s %-6s %6ld %10.3f %10.3f %10.3f %10.1f %12.3f\n", w.name,
                  device.c_str(), dtype.c_str(), "eager", long(w.batch), r.median_ms, r.min_ms,
                  r.max_ms, r.peak_mib, r.first_step_s);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_torch: %s\n", e.what());
    return 1;
  }
  return 0;
}
