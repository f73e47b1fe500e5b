// bench_hf_load: how long loading a Hugging Face GPT-2 folder takes (nn/hf_gpt2.h), and the
// process's peak resident memory (VmHWM) against the size of the weights: the mapped files are
// copied tensor by tensor and their pages given back (Note [Mapped safetensors] in
// core/safetensors_mapped.h), so the peak is the model plus one tensor, not the model twice.
// --make writes a random GPT-2 of one of GPT-2's sizes first (save_hf_gpt2), since the released
// weights need a network. Leaves out: Llama (its loader is not written yet), tokenizers.
//
//   ./build/benchmarks/bench_hf_load --make /tmp/gpt2-d12 --depth d12 --dtype bf16
//   ./build/benchmarks/bench_hf_load /tmp/gpt2-d12 --device cuda     # or cpu (the default)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/hf_gpt2.h"

using namespace loom;

namespace {

using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in MiB (VmHWM: the peak resident set; VmRSS: now).
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return 0;
}

double folder_mib(const std::string& dir) {
  double bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") bytes += double(e.file_size());
  return bytes / (1 << 20);
}

DType parse_dtype(const std::string& s) {
  if (s == "f32") return kF32;
  if (s == "bf16") return kBF16;
  if (s == "f16") return kF16;
  throw Error("bench_hf_load: --dtype " + s + " is not f32, bf16 or f16");
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, make, depth = "d12", dtype = "f32", device = "cpu";
  CLI::App app{"Time loading a Hugging Face GPT-2 folder"};
  app.add_option("dir", dir, "the folder to load");
  app.add_option("--make", make, "write a random GPT-2 folder here instead, then exit");
  app.add_option("--depth", depth, "with --make: d12 (124M), d24, d36 or d48");
  app.add_option("--dtype", dtype, "the file's dtype (--make) or the model's (loading)");
  app.add_option("--device", device, "cpu or cuda");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!make.empty()) {
      nn::GPT model(nn::GPTConfig::gpt2(depth));
      nn::save_hf_gpt2(model, make, {.dtype = parse_dtype(dtype)});
      std::printf("wrote %s: GPT-2 %s, %.1f MiB of %s weights\n", make.c_str(), depth.c_str(),
                  folder_mib(make), dtype.c_str());
      return 0;
    }
    LOOM_CHECK(!dir.empty(), "bench_hf_load: give a folder to load (or --make DIR)");
    LOOM_CHECK(device == "cpu" || cuda::is_available(), "bench_hf_load: no GPU for --device ",
               device);
    Device dev = device == "cpu" ? kCPU : cuda_device(0);
    const DType dt = parse_dtype(dtype);
    // load_hf_gpt2's steps, timed apart: building GPT(config) runs its random init, which has
    // nothing to do with the checkpoint.
    double before = status_mib("VmRSS");
    auto t0 = Clock::now();
    nn::HfCheckpoint ckpt(dir);
    auto model = nn::make<nn::GPT>(nn::gpt2_config_from_hf(ckpt.config()));
    model->to(dev, dt);
    auto t1 = Clock::now();
    nn::load_hf_gpt2_into(*model, ckpt);
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    auto t2 = Clock::now();
    auto sec = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double>(b - a).count();
    };
    double params_mib = double(model->num_parameters()) * double(dtype_size(dt)) / (1 << 20);
    std::printf(
        "%s (%.1f MiB of weights) -> %s %s: %.4f s (config, mapping, GPT(config): %.4f s; copying "
        "the "
        "weights %.4f s); parameters %.1f MiB; resident memory %.1f MiB before, %.1f MiB after, "
        "peak %.1f MiB\n",
        dir.c_str(), folder_mib(dir), device.c_str(), dtype.c_str(), sec(t0, t2), sec(t0, t1),
        sec(t1, t2), params_mib, before, status_mib("VmRSS"), status_mib("VmHWM"));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
