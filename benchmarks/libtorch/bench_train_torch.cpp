// bench_train_torch: the libtorch twin of benchmarks/bench_train.cpp. The same workloads (mlp,
// cnn, wide; and gpt, gpt-mini with the GPT twin below and AdamW; docs/workloads.md), batch
// sizes, initialisation scale (PyTorch's defaults, which loom's nn::init copies), Adam(lr 1e-3),
// random inputs already on the device, strict fp32 (TF32 off in cuBLAS and cuDNN) or bf16 autocast,
// and the same timing protocol: warm up, then time `steps` steps `repeats` times, synchronising the
// device around each repeat, and report the median, min and max ms/step, the peak device memory and
// the time from process start to the end of the first step. The output line has the same columns as
// bench_train's, so scripts/bench-compare.sh can join the two. Leaves out: CUDA graphs (libtorch's
// C++ API has torch::cuda::CUDAGraph, but PyTorch's whole-step capture needs the Python side's
// optimizer support; the graph rows are loom-only).
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
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

// ---- the GPT workloads: the libtorch twin of loom's GPT (nn/gpt.h) -------------------------
// The same architecture (pre-norm blocks, one qkv Linear, causal attention, tanh GELU, the output
// head tied to the token embedding), GPT-2's init, and the loss over every position. Attention is
// PyTorch's fused scaled_dot_product_attention (flash attention on an H200 in bf16) from PyTorch
// 2.0 on; Debian's libtorch 1.13 has none, so there it is the composite (matmul, mask, softmax,
// matmul). No dropout (the benchmark trains without it).
namespace gpt_torch {

struct Config {
  int64_t vocab = 50304, block = 1024, layers = 12, heads = 12, width = 768;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(const Config& c) : heads(c.heads), width(c.width) {
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    c_attn = register_module("c_attn", torch::nn::Linear(c.width, 3 * c.width));
    attn_proj = register_module("attn_proj", torch::nn::Linear(c.width, c.width));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    c_fc = register_module("c_fc", torch::nn::Linear(c.width, 4 * c.width));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * c.width, c.width));
  }

  // q, k, v: (B, H, T, D) -> (B, H, T, D), causal.
  static torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
    int64_t T = q.size(2);
    auto s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(3)));
    auto mask = torch::ones({T, T}, q.options().dtype(torch::kBool)).triu(1);
    s = s.masked_fill(mask, -std::numeric_limits<float>::infinity());
    return torch::matmul(torch::softmax(s, -1), v);
#endif
  }

  torch::Tensor forward(torch::Tensor x) {  // (B, T, C)
    int64_t B = x.size(0), T = x.size(1), D = width / heads;
    auto qkv = c_attn(ln_1(x)).view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});
    auto y = attention(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape({B, T, width});
    x = x + attn_proj(y);
    return x + mlp_proj(torch::gelu(c_fc(ln_2(x)), "tanh"));
  }

  int64_t heads, width;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const Config& c) : vocab(c.vocab) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", torch::nn::Embedding(c.block, c.width));
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
    register_module("h", blocks);
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    // GPT-2's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0.
    torch::NoGradGuard g;
    for (auto& p : named_parameters()) {
      const std::string& n = p.key();
      if (n.find("ln_") != std::string::npos) continue;  // LayerNorms keep 1 and 0
      if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0)
        p.value().zero_();
      else
        p.value().normal_(0.0, n.find("proj") != std::string::npos
                                   ? 0.02 / std::sqrt(2.0 * double(c.layers))
                                   : 0.02);
    }
  }

  // idx: (B, T) int64 -> logits (B, T, V); the head is wte's matrix (tied).
  torch::Tensor forward(const torch::Tensor& idx) {
    auto pos = torch::arange(idx.size(1), idx.options());
    auto x = wte(idx) + wpe(pos);
    for (const auto& b : *blocks) x = b->as<BlockImpl>()->forward(x);
    return torch::matmul(ln_f(x), wte->weight.t());
  }

  int64_t vocab;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT);

// AdamW as GPT-2 trains: betas (0.9, 0.95), weight decay 0.1 on the matrices only.
inline std::unique_ptr<torch::optim::AdamW> adamw(GPT& m, double lr) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : m->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto o = torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(0.1);
  auto o0 = o;
  o0.weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(o));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(o0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), o);
}

}  // namespace gpt_torch

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
  torch::nn::Sequential (*make)();  // the image classifiers; null for a GPT
  gpt_torch::Config gpt{};          // the GPT workloads' sizes (block = the sequence length)
};

// The model, its optimizer and the step's loss on fixed random inputs on the device: a classifier
// on (batch, 1, 28, 28) images with Adam(1e-3), or a GPT on (batch, T) token ids with AdamW(6e-4).
struct Setup {
  std::shared_ptr<torch::nn::Module> model;
  std::unique_ptr<torch::optim::Optimizer> opt;
  std::function<torch::Tensor()> loss;
};

Setup make_setup(const Workload& w, const torch::Device& dev) {
  Setup s;
  auto ids = torch::TensorOptions().dtype(torch::kLong).device(dev);
  if (!w.make) {
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
  auto m = w.make();
  m->to(dev);
  s.opt = std::make_unique<torch::optim::Adam>(m->parameters(), torch::optim::AdamOptions(1e-3));
  auto x = torch::randn({w.batch, 1, 28, 28}, torch::TensorOptions().device(dev));
  auto y = torch::randint(0, 10, {w.batch}, ids);
  s.loss = [m, x, y]() mutable { return torch::nn::functional::cross_entropy(m->forward(x), y); };
  s.model = m.ptr();
  return s;
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

Result run(const Workload& w, const torch::Device& dev, bool bf16, int warmup, int steps,
           int repeats) {
  torch::manual_seed(0);
  Setup s = make_setup(w, dev);
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
          "usage: bench_train_torch [--workload mlp|cnn|wide|gpt|gpt-mini|all] [--device "
          "cpu|cuda|cuda:N] "
          "[--dtype fp32|bf16] [--warmup N] [--steps N] [--repeats N]\n(bad argument '%s')\n",
          a.c_str());
      return 2;
    }
  }
  if (workload != "all" && workload != "mlp" && workload != "cnn" && workload != "wide" &&
      workload != "gpt" && workload != "gpt-mini") {
    std::fprintf(stderr,
                 "bench_train_torch: --workload must be mlp, cnn, wide, gpt, gpt-mini or all, "
                 "got '%s'\n",
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
    // gpt: GPT-2 124M (vocabulary padded to 50304, as llm.c), B 16, T 1024; gpt-mini: the CPU's.
    std::vector<Workload> all = {{"mlp", 256, &mlp},
                                 {"cnn", 256, &cnn},
                                 {"wide", 2048, &wide},
                                 {"gpt", 16, nullptr, {}},
                                 {"gpt-mini", 8, nullptr, {256, 128, 4, 4, 128}}};
    std::printf("%-6s %-8s %-6s %-6s %6s %10s %10s %10s %10s %12s\n", "model", "device", "dtype",
                "mode", "batch", "ms/step", "min ms", "max ms", "peak MiB", "first step s");
    for (const Workload& w : all) {
      // "all" means the image workloads; a GPT row is asked for by name.
      if (workload != w.name && (workload != "all" || !w.make)) continue;
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
