// bench_decode: generation speed of a Llama at batch 1 (nn::generate with the KV cache, greedy):
// the prompt's forward (prefill) and then tokens/s of the one-token steps, against the bound that
// reading every weight once per token sets (weight bytes / the memory bandwidth: 4.8 TB/s on an
// H200). The weights are random (drawn on the device: Note [Where a module makes its parameters]
// in nn/init.h); the speed does not depend on them. benchmarks/pytorch/llama_decode.py is the
// PyTorch twin. The decode runs through one of three paths (--decode): `growing`, nn::generate's
// KV cache grown by concatenation (each step new shapes); `static`, a GraphDecoder's
// preallocated cache of prompt + new-tokens positions, its step run eagerly; `graph`, the same
// step captured once as a CUDA graph and replayed (Note [Graph decode] in nn/graph_decode.cpp).
// The GraphDecoder is made once and reused by every run (its graph captured in the warm-up), so
// the timed runs measure replays, not captures. Leaves out: batches of prompts, sampling (greedy
// only).
//
//   ./build/benchmarks/bench_decode --model llama3.2-1b                  # cuda when there is a GPU
//   ./build/benchmarks/bench_decode --model llama3.2-1b --decode graph   # the replayed step
//   ./build/benchmarks/bench_decode --model tiny --device cpu --new-tokens 16 --decode static
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/gpt_sample.h"
#include "nn/graph_decode.h"
#include "nn/init.h"
#include "nn/llama.h"

using namespace loom;

namespace {

struct DecodeFlags {
  std::string model = "llama3.2-1b", device, dtype = "bf16", decode = "growing";
  int64_t prompt = 16, new_tokens = 128;
  int repeats = 3;
  double bandwidth_tbs = 4.8;  // H200: 4.8 TB/s (HBM3e)
};

// Seconds generate() takes for `n` new tokens after `prompt` (the device synchronised: greedy
// decoding reads every token back to the host anyway).
double seconds_for(nn::Llama& model, const std::vector<int64_t>& prompt, int64_t n) {
  nn::SampleOptions o{.max_new_tokens = n, .temperature = 0.0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> out = nn::generate(model, prompt, o);
  LOOM_CHECK(int64_t(out.size()) == n, "bench_decode: generate stopped after ", out.size());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds of the prompt's forward with its first token, and of the n - 1 greedy steps after it,
// through a GraphDecoder (each token read back, as generate() reads it).
std::pair<double, double> decoder_seconds(nn::GraphDecoder& d, const std::vector<int64_t>& prompt,
                                          int64_t n) {
  auto t0 = std::chrono::steady_clock::now();
  d.prefill(prompt);
  int64_t next = d.greedy_token();
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t i = 1; i < n; ++i) {
    d.step(next);
    next = d.greedy_token();
  }
  auto t2 = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(),
          std::chrono::duration<double>(t2 - t1).count()};
}

// The prefill's seconds and the steps' tokens/s of each of `repeats` runs, after a warm-up
// (kernels loaded, plans made, the allocator filled; for `graph`, the step captured).
std::pair<std::vector<double>, std::vector<double>> measure(nn::Llama& model,
                                                            const std::vector<int64_t>& prompt,
                                                            const DecodeFlags& f) {
  std::vector<double> prefill, decode;
  if (f.decode == "growing") {
    seconds_for(model, prompt, 2);
    for (int r = 0; r < f.repeats; ++r) {
      double one = seconds_for(model, prompt, 1), all = seconds_for(model, prompt, f.new_tokens);
      prefill.push_back(one);
      decode.push_back(double(f.new_tokens - 1) / (all - one));  // tokens/s of the steps alone
    }
    return {prefill, decode};
  }
  model.eval();
  nn::GraphDecoder d(model, f.prompt + f.new_tokens, /*cuda_graph=*/f.decode == "graph");
  decoder_seconds(d, prompt, 3);
  for (int r = 0; r < f.repeats; ++r) {
    auto [p, steps] = decoder_seconds(d, prompt, f.new_tokens);
    prefill.push_back(p);
    decode.push_back(double(f.new_tokens - 1) / steps);
  }
  LOOM_CHECK(f.decode != "graph" || !model.device().is_cuda() || d.graphed(),
             "bench_decode: the decoder did not capture its step");
  return {prefill, decode};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Llama decode speed at batch 1 (docs/llama.md)"};
  DecodeFlags f;
  app.add_option("--model", f.model, "a Llama preset: tiny, llama3.2-1b, llama3.2-3b, llama3-8b");
  app.add_option("--device", f.device, "cuda (the default with a GPU) or cpu");
  app.add_option("--dtype", f.dtype, "bf16 or f32")->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--prompt", f.prompt, "prompt tokens")->check(CLI::Range(1, 1 << 20));
  app.add_option("--new-tokens", f.new_tokens, "tokens generated")->check(CLI::Range(2, 1 << 20));
  app.add_option("--repeats", f.repeats, "timed runs (the median is reported)")
      ->check(CLI::Range(1, 100));
  app.add_option("--bandwidth", f.bandwidth_tbs, "the device's memory bandwidth in TB/s");
  app.add_option("--decode", f.decode,
                 "growing (generate's concatenating KV cache), static (a preallocated cache, the "
                 "step eager) or graph (the static cache's step replayed as a CUDA graph)")
      ->check(CLI::IsMember({"growing", "static", "graph"}));
  CLI11_PARSE(app, argc, argv);
  try {
    Device dev =
        f.device.empty() ? (cuda::is_available() ? cuda_device(0) : kCPU) : Device(f.device);
    const DType dt = f.dtype == "bf16" ? kBF16 : kF32;
    nn::LlamaConfig c = nn::LlamaConfig::preset(f.model);
    c.max_seq_len = f.prompt + f.new_tokens;
    manual_seed(0);
    nn::init::ParameterScope where(dev, dt);
    nn::Llama model(c);
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < f.prompt; ++i) prompt.push_back((i * 7919) % c.vocab_size);
    auto [prefill, decode] = measure(model, prompt, f);
    const double bytes = double(model.num_parameters()) * double(dtype_size(dt));
    const double bound = f.bandwidth_tbs * 1e12 / bytes;
    const char* path = f.decode == "growing"  ? "the growing KV cache (generate)"
                       : f.decode == "static" ? "the static KV cache, the step eager"
                       : dev.is_cuda()        ? "the static KV cache, the step a CUDA graph"
                                              : "the static KV cache, the step eager (no graph "
                                                "on the CPU)";
    std::printf("%s on %s in %s: %.1fM parameters (%.2f GB), prompt %ld, %ld new tokens\n",
                f.model.c_str(), dev.str().c_str(), f.dtype.c_str(),
                double(model.num_parameters()) / 1e6, bytes / 1e9, long(f.prompt),
                long(f.new_tokens));
    std::printf("  decode through %s (--decode %s)\n", path, f.decode.c_str());
    std::printf(
        "  prefill %.2f ms; decode %.1f tokens/s (%.2f ms/token); bound %.1f tokens/s at "
        "%.1f TB/s: %.0f%% of it\n",
        median(prefill) * 1e3, median(decode), 1e3 / median(decode), bound, f.bandwidth_tbs,
        100.0 * median(decode) / bound);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
}
