// bench_train: the training-step workloads of docs/workloads.md (mlp, cnn, wide; by name: gpt,
// gpt-mini, and the image models resnet50 and vit-b16 on 3x224x224 inputs with 1000 classes) with
// their timing protocol: one step = zero grads, forward, cross-entropy, backward, Adam(lr 1e-3)
// update (the GPTs: AdamW, GPT-2's two groups, and gradient clipping at 1), on random inputs
// already on the device; warm up, then time `steps` steps, `repeats` times, and
// report the median, min and max ms/step, the peak device memory and the time from process start
// to the end of the first step. Strict fp32 (TF32 off), or --amp bf16 (autocast, float32 master
// weights; the dtype column says bf16) or --amp fp16 (autocast and a GradScaler), or --amp fp8
// (bf16 autocast, and every Linear but the first and last in FP8: docs/fp8.md). --cuda-graph
// replays the whole step (zero-grad, forward, backward, optimizer) as one graph (see
// train/step_runner.h). Under autocast on CUDA the convolutions run channels-last (docs/amp.md);
// --channels-last off keeps them NCHW, as the libtorch twin's are. --optimizer-in-backward updates
// each parameter as soon as backward has its gradient and frees the gradient (mode column
// "in-bwd"; nn/optim/in_backward.h): the same updates, a lower peak. --activation-checkpointing
// (the GPTs) recomputes each transformer block in backward (mode column "ckpt");
// --recompute-activations rebuilds batch norm + ReLU and GELU outputs in backward instead of
// keeping them (autograd/recompute.h; mode "recomp", or "graph+r" with --cuda-graph). The Llamas:
// llama1b (Llama-3.2-1B's shape, B 4, T 2048), llama-tiny, and llama8b-lora (Llama-3-8B's shape,
// B 1, T 2048: the weights frozen in bf16, rank-16 LoRA adapters on the attention and MLP Linears
// in float32, activation checkpointing always on; the closing row gives tokens/s and the peak;
// llama-tiny-lora is the same on the tiny Llama, for the CPU). bert-base: BERT-base pretraining by
// masked-language modelling (B 32, T 512, labels at 15% of the positions, no dropout; bert-tiny
// for the CPU); benchmarks/pytorch/bert_bench.py is its PyTorch twin.
// --profile-timed turns a profiler's collection on for the timed steps only (run it under
// `ncu --profile-from-start off`; scripts/kernel-breakdown.py sums the kernels per step).
// benchmarks/libtorch/ holds its libtorch twin, with the same output columns;
// scripts/bench-compare.sh runs both side by side.
//
//   ./build/benchmarks/bench_train                       # every workload on the default device
//   ./build/benchmarks/bench_train --workload mlp --device cpu --steps 10 --repeats 3
//   ./build/benchmarks/bench_train --workload wide --amp bf16
//   ./build/benchmarks/bench_train --workload gpt --amp fp8    # against --amp bf16: docs/fp8.md
//   ./build/benchmarks/bench_train --workload gpt --amp bf16   # GPT-2 124M, B 16, T 1024
//   ./build/benchmarks/bench_train --workload resnet50 --amp bf16   # channels-last, batch 64
#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "autograd/recompute.h"
#include "core/cuda/available.h"
#include "nn/amp/grad_scaler.h"
#include "nn/bert.h"
#include "nn/fp8.h"
#include "nn/fuse.h"
#include "nn/gpt.h"
#include "nn/init.h"
#include "nn/llama.h"
#include "nn/lora.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/flags.h"
#include "train/make_optimizer.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kProcessStart = Clock::now();  // as close to process start as C++ allows

struct Workload {
  std::string name;
  int64_t batch;
  std::shared_ptr<nn::Module> (*make)();    // the image classifiers; null for a GPT
  nn::GPTConfig gpt{};                      // the GPTs' sizes (block_size = the sequence T)
  std::array<int64_t, 3> image{1, 28, 28};  // an image classifier's input (C, H, W)
  int64_t classes = 10;
  bool by_name = false;   // left out of "all"
  std::string llama{};    // a Llama preset (nn/llama.h) instead of the GPT; T is gpt.block_size
  int64_t lora_rank = 0;  // > 0: the Llama's weights frozen in bf16, LoRA adapters of this rank
  std::string bert{};     // a BERT preset (nn/bert.h) trained by masked-language modelling
};

// GPT-2 124M with llm.c's padded vocabulary (50304, a multiple of 128), T = 1024; and a small one
// for the CPU table.
const nn::GPTConfig kGpt2{.vocab_size = 50304, .block_size = 1024};
// The Llama workloads' vocabulary and context T (the model itself is the preset's).
const nn::GPTConfig kLlamaT2048{.vocab_size = 128256, .block_size = 2048};
const nn::GPTConfig kLlamaTiny{.vocab_size = 96, .block_size = 64};
// BERT's vocabulary (bert-base-uncased's) and sequence length T.
const nn::GPTConfig kBertT512{.vocab_size = 30522, .block_size = 512};
const nn::GPTConfig kBertTinyT64{.vocab_size = 100, .block_size = 64};
const nn::GPTConfig kGptMini{
    .vocab_size = 256, .block_size = 128, .n_layer = 4, .n_head = 4, .n_embd = 128};

// The model, its optimizer and inputs on the device: (batch, C, H, W) images and labels with
// Adam(1e-3), or (batch, T) token ids and next tokens with AdamW(6e-4) as GPT-2 trains.
struct Setup {
  std::shared_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;
};

// A GPT of w.gpt's sizes, the Llama preset w.llama with the context w.gpt.block_size, or the
// BERT preset w.bert for masked-language modelling, without dropout (the fused attention takes
// none; the PyTorch twin, benchmarks/pytorch/bert_bench.py, sets it to 0 too).
std::shared_ptr<nn::Module> make_language_model(const Workload& w) {
  if (!w.bert.empty()) {
    nn::BertConfig c = nn::BertConfig::preset(w.bert);
    c.dropout = 0.0, c.classifier_dropout = 0.0;
    return std::make_shared<nn::BertForMaskedLM>(c);
  }
  if (w.llama.empty()) return std::make_shared<nn::GPT>(w.gpt);
  nn::LlamaConfig c = nn::LlamaConfig::preset(w.llama);
  c.max_seq_len = w.gpt.block_size;
  return std::make_shared<nn::Llama>(c);
}

// Every adapter of the model in float32 (apply_lora makes them in the base weights' bf16).
void adapters_to_f32(nn::Module& m) {
  if (auto* l = dynamic_cast<nn::Linear*>(&m); l && l->lora_A)
    l->lora_A->to(kF32), l->lora_B->to(kF32);
  for (const auto& [name, child] : m.named_children()) adapters_to_f32(*child);
}

// A language model made on the device (its random weights drawn there: Note [Where a module makes
// its parameters] in nn/init.h) in float32; a LoRA workload's in bf16, frozen, with float32
// adapters on the attention and MLP Linears and AdamW over the adapters only.
Setup make_language_setup(const Workload& w, Device dev) {
  Setup s;
  std::shared_ptr<nn::Module> m;
  {
    nn::init::ParameterScope where(dev, w.lora_rank > 0 ? kBF16 : kF32);
    m = make_language_model(w);
  }
  nn::fuse(*m);  // the fused transformer blocks (nn/fuse_transformer.h); a Llama stays plain
  m->to(dev);    // what the scope did not make (buffers)
  train::TrainConfig c;
  c.optimizer = "adamw", c.lr = 6e-4, c.weight_decay = 0.1;
  if (w.lora_rank > 0) {
    nn::apply_lora(*m, {.rank = w.lora_rank,
                        .alpha = 2.0 * double(w.lora_rank),
                        .targets = {"c_attn", "c_proj", "c_fc"}});
    adapters_to_f32(*m);
  }
  s.opt =
      train::make_transformer_adamw(c, w.lora_rank > 0 ? nn::lora_parameters(*m) : m->parameters());
  s.x = randint(0, w.gpt.vocab_size, {w.batch, w.gpt.block_size}, {.dtype = kI64, .device = dev});
  s.y = randint(0, w.gpt.vocab_size, {w.batch, w.gpt.block_size}, {.dtype = kI64, .device = dev});
  if (!w.bert.empty()) {  // MLM: a label at 15% of the positions, -100 (ignored) elsewhere
    Tensor chosen = lt(rand({w.batch, w.gpt.block_size}, {.device = dev}), 0.15);
    s.y = where(chosen, s.y, full_like(s.y, -100.0));
  }
  s.model = m;
  return s;
}

Setup make_setup(const Workload& w, Device dev) {
  manual_seed(0);
  if (!w.make) return make_language_setup(w, dev);
  Setup s;
  auto m = w.make();
  nn::fuse(*m);  // the fused Linear + ReLU, BatchNorm2d + ReLU (+ MaxPool2d(2)), ViT's blocks
  m->to(dev);
  s.opt = std::make_unique<optim::Adam>(m->parameters(), optim::AdamOptions{.lr = 1e-3});
  s.x = randn({w.batch, w.image[0], w.image[1], w.image[2]}, {.device = dev});
  s.y = randint(0, w.classes, {w.batch}, {.dtype = kI64, .device = dev});
  s.model = m;
  return s;
}

std::shared_ptr<nn::Module> mlp() { return nn::make_mlp(); }
std::shared_ptr<nn::Module> cnn() { return nn::make_cnn(); }
std::shared_ptr<nn::Module> wide() { return nn::make_wide(); }
std::shared_ptr<nn::Module> resnet50() { return nn::make_resnet50(); }  // ImageNet stem, 1000
std::shared_ptr<nn::Module> vit_b16() { return nn::make_vit_b16(); }    // 196 patches, 1000

// Seconds since an arbitrary start, after all queued device work finished.
double now_synced(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
  (void)d;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Result {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double peak_mib = 0;
  double first_step_s = 0;     // process start to the end of the first step
  double flops_per_token = 0;  // a GPT's (nn::GPT::flops_per_token), for the MFU
  int64_t parameters = 0;
};

// What run() does besides the step: the flags of main().
struct RunOptions {
  bool graph = false, in_backward = false, checkpointing = false;
  bool profile_timed = false;  // cuda::profiler_start/stop around the timed steps
  std::string amp_mode = "off";
};

Result run(const Workload& w, Device dev, int warmup, int steps, int repeats, const RunOptions& o) {
  const bool graph = o.graph;
  const std::string& amp_mode = o.amp_mode;
  Setup s = make_setup(w, dev);
  if (auto* gpt = dynamic_cast<nn::GPT*>(s.model.get()))
    gpt->set_activation_checkpointing(o.checkpointing);
  if (auto* llama = dynamic_cast<nn::Llama*>(s.model.get()))  // LoRA: always (the 8B's memory)
    llama->set_activation_checkpointing(o.checkpointing || w.lora_rank > 0);
  train::StepRunner runner(*s.model, *s.opt, 0.0, graph);  // eager, or a replayed CUDA graph
  if (!w.make) runner.set_grad_clip(1.0);
  amp::GradScaler scaler(amp::GradScalerOptions{.enabled = amp_mode == "fp16"});
  if (amp_mode != "off")
    runner.set_amp(amp_mode == "fp16" ? DType::F16 : DType::BF16,
                   scaler.is_enabled() ? &scaler : nullptr);
  if (amp_mode == "fp8")  // the Linears' products in FP8 (nn/fp8.h), to stderr: stdout is the table
    std::fprintf(stderr, "%s\n", nn::fp8_summary(nn::convert_to_fp8(*s.model)).c_str());
  runner.set_optimizer_in_backward(o.in_backward);
  auto step = [&] { runner.step(s.x, s.y); };
  step();
  now_synced(dev);
  double first_step_s = std::chrono::duration<double>(Clock::now() - kProcessStart).count();
  for (int i = 1; i < warmup; ++i) step();
  // Eager: the peak of the timed steps. A graph's replays allocate nothing (its activations live
  // in the pool the capture filled, in the warm-up), so its peak is taken from the start.
  if (dev.is_cuda() && !graph) cuda::reset_peak_memory_stats(dev.index);
  std::vector<double> ms;
  if (o.profile_timed) cuda::profiler_start();
  for (int r = 0; r < repeats; ++r) {
    double t0 = now_synced(dev);
    for (int i = 0; i < steps; ++i) step();
    double t1 = now_synced(dev);
    ms.push_back((t1 - t0) * 1e3 / steps);
  }
  if (o.profile_timed) cuda::profiler_stop();
  std::sort(ms.begin(), ms.end());
  Result res{ms[ms.size() / 2], ms.front(), ms.back(), 0, first_step_s};
  if (dev.is_cuda())
    res.peak_mib = double(cuda::memory_stats(dev.index).peak_allocated) / (1 << 20);
  if (auto* gpt = dynamic_cast<nn::GPT*>(s.model.get())) {
    res.flops_per_token = gpt->flops_per_token(w.gpt.block_size);
    res.parameters = gpt->num_parameters();
  }
  if (auto* llama = dynamic_cast<nn::Llama*>(s.model.get())) {
    res.flops_per_token = llama->flops_per_token(w.gpt.block_size);
    res.parameters = llama->num_parameters();
  }
  if (auto* bert = dynamic_cast<nn::BertForMaskedLM*>(s.model.get())) {  // 6 N + attention
    for (const Tensor& p : bert->parameters()) res.parameters += p.numel();
    const nn::BertConfig& c = bert->bert->config;
    res.flops_per_token =
        6.0 * double(res.parameters) + 12.0 * double(c.n_layers * c.hidden * w.gpt.block_size);
  }
  return res;
}

// A GPT row's tokens/s and model FLOPs utilisation (nn::GPT::flops_per_token over the step time)
// against the H100/H200's dense bf16 peak, 989 TFLOPS (NVIDIA's data sheet, without sparsity).
void print_throughput(const Workload& w, const Result& r) {
  double tokens = double(w.batch * w.gpt.block_size), tok_s = tokens / (r.median_ms * 1e-3);
  if (w.lora_rank > 0) {  // frozen weights get no gradient: 6 N per token would overstate it
    std::printf("  %s: %.0f tokens/s, %.1fM parameters (frozen, bf16), LoRA rank %ld\n",
                w.name.c_str(), tok_s, double(r.parameters) / 1e6, long(w.lora_rank));
    return;
  }
  std::printf("  %s: %.0f tokens/s, MFU %.1f%% of 989 TFLOPS (dense bf16), %.1fM parameters\n",
              w.name.c_str(), tok_s, 100.0 * tok_s * r.flops_per_token / 989e12,
              double(r.parameters) / 1e6);
}

// The benchmark's flags.
struct BenchFlags {
  std::string workload = "all", device;
  int warmup = 10, steps = 50, repeats = 5;
  bool graph = false;
  std::string amp_mode = "off";
  std::string channels_last = "on";
  bool in_backward = false, checkpointing = false, recompute = false, profile_timed = false;
};

void add_bench_flags(CLI::App& app, BenchFlags& f) {
  train::configure_app(app);
  app.add_option("--workload", f.workload,
                 "mlp, cnn, wide, all (those three), gpt, gpt-mini, resnet50, vit-b16, llama1b, "
                 "llama-tiny, llama8b-lora, llama-tiny-lora, bert-base or bert-tiny")
      ->check(CLI::IsMember({"mlp", "cnn", "wide", "all", "gpt", "gpt-mini", "resnet50", "vit-b16",
                             "llama1b", "llama-tiny", "llama8b-lora", "llama-tiny-lora",
                             "bert-base", "bert-tiny"}));
  train::add_device_flag(app, f.device);
  app.add_option("--warmup", f.warmup, "warm-up steps")->check(train::int_range(1, 1000000));
  app.add_option("--steps", f.steps, "timed steps per repeat")->check(train::int_range(1, 1000000));
  app.add_option("--repeats", f.repeats, "repeats (the median is reported)")
      ->check(train::int_range(1, 10000));
  train::add_cuda_graph_flag(app, f.graph);
  train::add_amp_flag(app, f.amp_mode);
  app.add_option("--channels-last", f.channels_last,
                 "on (default) or off: autocast's channels-last convolutions on CUDA")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--optimizer-in-backward", f.in_backward,
               "update each parameter inside backward and free its gradient (lower peak memory)");
  train::add_activation_checkpointing_flag(app, f.checkpointing);
  train::add_recompute_activations_flag(app, f.recompute);
  app.add_flag("--profile-timed", f.profile_timed,
               "a profiler's collection on for the timed steps only (cudaProfilerStart/Stop): "
               "run under `ncu --profile-from-start off` or `nsys --capture-range=cudaProfilerApi` "
               "to leave out the first step and the warm-up");
}

// The mode column: how the step ran.
const char* mode_name(const BenchFlags& f) {
  if (f.graph) return f.recompute ? "graph+r" : "graph";
  if (f.in_backward) return "in-bwd";
  if (f.checkpointing) return "ckpt";
  return f.recompute ? "recomp" : "eager";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom training-step benchmark (WORKLOADS.md)"};
  BenchFlags f;
  add_bench_flags(app, f);
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;
  amp::set_channels_last_convolutions(f.channels_last == "on");
  autograd::set_recompute_activations(f.recompute);

  Device dev = kCPU;
  if (f.device.empty() && cuda::is_available()) dev = cuda_device(0);
  try {
    if (!f.device.empty()) dev = Device(f.device);
    std::vector<Workload> all = {
        {"mlp", 256, &mlp},
        {"cnn", 256, &cnn},
        {"wide", 2048, &wide},
        {"gpt", 16, nullptr, kGpt2, {}, 0, true},
        {"gpt-mini", 8, nullptr, kGptMini, {}, 0, true},
        {"resnet50", 64, &resnet50, {}, {3, 224, 224}, 1000, true},
        {"vit-b16", 64, &vit_b16, {}, {3, 224, 224}, 1000, true},
        {"llama1b", 4, nullptr, kLlamaT2048, {}, 0, true, "llama3.2-1b"},
        {"llama-tiny", 4, nullptr, kLlamaTiny, {}, 0, true, "tiny"},
        {"llama8b-lora", 1, nullptr, kLlamaT2048, {}, 0, true, "llama3-8b", 16},
        {"llama-tiny-lora", 4, nullptr, kLlamaTiny, {}, 0, true, "tiny", 4},
        {"bert-base", 32, nullptr, kBertT512, {}, 0, true, "", 0, "bert-base"},
        {"bert-tiny", 8, nullptr, kBertTinyT64, {}, 0, true, "", 0, "tiny"}};
    std::printf("%-6s %-8s %-6s %-6s %6s %10s %10s %10s %10s %12s\n", "model", "device", "dtype",
                "mode", "batch", "ms/step", "min ms", "max ms", "peak MiB", "first step s");
    for (const Workload& w : all) {
      // "all" means the small image workloads; the GPTs and ImageNet-sized models by name.
      if (f.workload != w.name && (f.workload != "all" || w.by_name)) continue;
      const RunOptions o{.graph = f.graph,
                         .in_backward = f.in_backward,
                         .checkpointing = f.checkpointing,
                         .profile_timed = f.profile_timed,
                         .amp_mode = f.amp_mode};
      Result r = run(w, dev, f.warmup, f.steps, f.repeats, o);
      std::printf("%-6s %-8s %-6s %-6s %6ld %10.3f %10.3f %10.3f %10.1f %12.3f\n", w.name.c_str(),
                  dev.str().c_str(), f.amp_mode == "off" ? "fp32" : f.amp_mode.c_str(),
                  mode_name(f), long(w.batch), r.median_ms, r.min_ms, r.max_ms, r.peak_mib,
                  r.first_step_s);
      if (!w.make) print_throughput(w, r);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {  // loom::Error and anything else: one line, exit code 1
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
