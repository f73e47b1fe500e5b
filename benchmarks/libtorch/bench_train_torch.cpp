// bench_train_torch: the libtorch twin of benchmarks/bench_train.cpp. The same workloads
// (docs/workloads.md): mlp, cnn, wide ("all"); and, asked for by name, gpt and gpt-mini (the GPT
// twin, benchmarks/libtorch/gpt_torch.h, with AdamW), resnet50 and vit-b16 (torchvision's
// ResNet-50 and loom's ViT-B/16, benchmarks/libtorch/vision_torch.h, on batches of 64 random
// 3x224x224 images with 1000 classes). The same batch sizes, initialisation (PyTorch's defaults,
// which loom's nn::init copies, or the model's own), Adam(lr 1e-3) for the image classifiers,
// random inputs already on the device, strict fp32 (TF32 off in cuBLAS and cuDNN) or bf16
// autocast, and the same timing protocol: warm up, then time `steps` steps `repeats` times,
// synchronising the device around each repeat, and report the median, min and max ms/step, the
// peak device memory and the time from process start to the end of the first step. The output line
// has the same columns as bench_train's, so scripts/bench-compare.sh can join the two.
// Under --dtype bf16 resnet50 runs channels-last as PyTorch users run it (the model's 4-D
// parameters and the input in torch::MemoryFormat::ChannelsLast), as bench_train's autocast
// convolutions do on CUDA; --channels-last off keeps it NCHW, --channels-last on asks for it in
// fp32 too. The other workloads stay NCHW. Leaves out: CUDA graphs (libtorch's C++ API has
// torch::cuda::CUDAGraph, but PyTorch's whole-step capture needs the Python side's optimizer
// support; the graph rows are loom-only).
//
//   ./build/benchmarks/libtorch/bench_train_torch --workload mlp --device cuda
//   ./build/benchmarks/libtorch/bench_train_torch --workload all --device cpu --steps 10
//   ./build/benchmarks/libtorch/bench_train_torch --workload resnet50 --dtype bf16
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
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/libtorch/gpt_torch.h"
#include "benchmarks/libtorch/vision_torch.h"

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

// What a workload trains: a small classifier on (batch, 1, 28, 28) images with 10 classes (mlp,
// cnn, wide: the "all" rows), a GPT on (batch, T) token ids, or an ImageNet classifier on
// (batch, 3, 224, 224) images with 1000 classes.
enum class Kind { kSmall, kGpt, kResNet50, kViT };

struct Workload {
  const char* name;
  int64_t batch;
  Kind kind;
  torch::nn::Sequential (*make)() = nullptr;  // the small classifiers' model
  gpt_torch::Config gpt{};  // the GPT workloads' sizes (block = the sequence length)
};

// The model, its optimizer and the step's loss on fixed random inputs on the device: a classifier
// with Adam(1e-3), or a GPT on (batch, T) token ids with AdamW(6e-4).
struct Setup {
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::function<torch::Tensor()> loss;
};

// A classifier m on the images x (on the device): Adam(1e-3) and the cross-entropy of m(x) against
// fixed random labels in [0, classes).
template <typename Model>
Setup classifier(Model m, const torch::Tensor& x, int64_t classes) {
  Setup s;
  s.opt = std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(1e-3));
  auto y = torch::randint(0, classes, {x.size(0)}, x.options().dtype(torch::kLong));
  s.loss = [m, x, y]() mutable { return torch::nn::functional::cross_entropy(m->forward(x), y); };
  s.model = m.ptr();
  return s;
}

// What `model.to(memory_format=torch.channels_last)` does in Python: every 4-D parameter (the
// convolutions' weights) to NHWC strides, in place, so the optimizer sees the same tensors.
void to_channels_last(torch::nn::Module& m) {
  for (auto& p : m.parameters())
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
}

Setup make_setup(const Workload& w, const torch::Device& dev, bool channels_last) {
  auto f32 = torch::TensorOptions().device(dev);
  switch (w.kind) {
    case Kind::kGpt: {
      Setup s;
      auto ids = torch::TensorOptions().dtype(torch::kLong).device(dev);
      gpt_torch::GPT m(w.gpt);
      m->to(dev);
      s.opt = gpt_torch::adamw(m, 6e-4);
      auto x = torch::randint(0, w.gpt.vocab, {w.batch, w.gpt.block}, ids);
      auto y = torch::randint(0, w.gpt.vocab, {w.batch, w.gpt.block}, ids);
      s.loss = [m, x, y, v = w.gpt.vocab]() mutable {
        return torch::nn::functional::cross_entropy(m->forward(x).view({-1, v}), y.view({-1}));
      };
      s.model = m.ptr();
      return s;
    }
    case Kind::kResNet50: {
      vision_torch::ResNet50 m;
      m->to(dev);
      auto x = torch::randn({w.batch, 3, 224, 224}, f32);
      if (channels_last) {
        to_channels_last(*m);
        x = x.contiguous(at::MemoryFormat::ChannelsLast);
      }
      return classifier(m, x, 1000);
    }
    case Kind::kViT: {
      vision_torch::ViT m;
      m->to(dev);
      return classifier(m, torch::randn({w.batch, 3, 224, 224}, f32), 1000);
    }
    case Kind::kSmall:
      break;
  }
  auto m = w.make();
  m->to(dev);
  return classifier(m, torch::randn({w.batch, 1, 28, 28}, f32), 10);
}

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

Result run(const Workload& w, const torch::Device& dev, bool bf16, bool channels_last, int warmup,
           int steps, int repeats) {
  torch::manual_seed(0);
  Setup s = make_setup(w, dev, channels_last);
  auto step = [&] {
    s.opt->zero_grad();
    torch::Tensor loss;
    if (bf16) {
      set_bf16_autocast(dev, true);
      loss = s.loss();
      set_bf16_autocast(dev, false);
    } else {
      loss = s.loss();
    }
    loss.backward();
    s.opt->step();
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

// gpt: GPT-2 124M (vocabulary padded to 50304, as llm.c), B 16, T 1024; gpt-mini: the CPU's.
const std::vector<Workload> kWorkloads = {
    {"mlp", 256, Kind::kSmall, &mlp},
    {"cnn", 256, Kind::kSmall, &cnn},
    {"wide", 2048, Kind::kSmall, &wide},
    {"gpt", 16, Kind::kGpt},
    {"gpt-mini", 8, Kind::kGpt, nullptr, {256, 128, 4, 4, 128}},
    {"resnet50", 64, Kind::kResNet50},
    {"vit-b16", 64, Kind::kViT}};

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "all", device, dtype = "fp32", channels_last;  // "": on under bf16
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
    else if (a == "--channels-last" && has_value)
      channels_last = argv[++i];
    else if (a == "--warmup" && has_value)
      warmup = positive("--warmup", argv[++i]);
    else if (a == "--steps" && has_value)
      steps = positive("--steps", argv[++i]);
    else if (a == "--repeats" && has_value)
      repeats = positive("--repeats", argv[++i]);
    else {
      std::fprintf(
          stderr,
          "usage: bench_train_torch [--workload mlp|cnn|wide|all|gpt|gpt-mini|resnet50|vit-b16] "
          "[--device cpu|cuda|cuda:N] [--dtype fp32|bf16] [--channels-last on|off] [--warmup N] "
          "[--steps N] [--repeats N]\n(bad argument '%s')\n",
          a.c_str());
      return 2;
    }
  }
  if (workload != "all" && std::none_of(kWorkloads.begin(), kWorkloads.end(),
                                        [&](const Workload& w) { return workload == w.name; })) {
    std::fprintf(stderr,
                 "bench_train_torch: --workload must be mlp, cnn, wide, all, gpt, gpt-mini, "
                 "resnet50 or vit-b16, got '%s'\n",
                 workload.c_str());
    return 2;
  }
  if (dtype != "fp32" && dtype != "bf16") {
    std::fprintf(stderr, "bench_train_torch: --dtype must be fp32 or bf16, got '%s'\n",
                 dtype.c_str());
    return 2;
  }
  if (!channels_last.empty() && channels_last != "on" && channels_last != "off") {
    std::fprintf(stderr, "bench_train_torch: --channels-last must be on or off, got '%s'\n",
                 channels_last.c_str());
    return 2;
  }
  // resnet50's memory format: channels-last under bf16 unless --channels-last off; fp32 only when
  // asked (--channels-last on).
  bool nhwc = channels_last == "on" || (channels_last.empty() && dtype == "bf16");
  try {
    if (device.empty()) device = torch::cuda::is_available() ? "cuda" : "cpu";
    torch::Device dev(device);
    // "cuda" has no index (-1), which the caching allocator's statistics calls reject: name it.
    if (dev.is_cuda() && !dev.has_index()) dev = torch::Device(torch::kCUDA, 0);
    // Strict fp32: no TF32 in cuBLAS or cuDNN (the default for convolutions is on).
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setBenchmarkCuDNN(true);
    std::printf("%-6s %-8s %-6s %-6s %6s %10s %10s %10s %10s %12s\n", "model", "device", "dtype",
                "mode", "batch", "ms/step", "min ms", "max ms", "peak MiB", "first step s");
    for (const Workload& w : kWorkloads) {
      // "all" means the small image workloads; a GPT, ResNet-50 or ViT row is asked for by name.
      if (workload != w.name && (workload != "all" || w.kind != Kind::kSmall)) continue;
      Result r = run(w, dev, dtype == "bf16", nhwc, warmup, steps, repeats);
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
