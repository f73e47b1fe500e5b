// bench_hf_load: how long loading a Hugging Face GPT-2 or Llama folder takes (nn/hf_gpt2.h,
// nn/hf_llama.h), and the process's peak resident memory (VmHWM) against the size of the weights:
// the mapped files are copied tensor by tensor and their pages given back (Note [Mapped
// safetensors] in core/safetensors_mapped.h), so the peak is the model plus one tensor, not the
// model twice.
// --make writes a random GPT-2 or Llama of a released size first (save_hf_gpt2, save_hf_llama),
// since the released weights need a network (drawn on --device). Loading makes the model in place
// on the device in its dtype, uninitialised (Note [Where a module makes its parameters] in
// nn/init.h), so an 8B Llama in bf16 takes 16 GB on the GPU and about one tensor on the host.
// Leaves out: tokenizers.
//
//   ./build/benchmarks/bench_hf_load --make /tmp/gpt2-d12 --depth d12 --dtype bf16
//   ./build/benchmarks/bench_hf_load /tmp/gpt2-d12 --device cuda     # or cpu (the default)
//   ./build/benchmarks/bench_hf_load --make /tmp/l8b --arch llama --model llama3-8b --dtype bf16
//       --device cuda;  ./build/benchmarks/bench_hf_load /tmp/l8b --device cuda --dtype bf16
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/hf_gpt2.h"
#include "nn/hf_llama.h"
#include "nn/init.h"

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

// A random model of `model`'s shape (GPT-2: d12 ... d48; Llama: a preset) written to `dir` in
// `dt`, made on `dev` (Note [Where a module makes its parameters] in nn/init.h).
void make_folder(const std::string& arch, const std::string& model, const std::string& dir,
                 DType dt, Device dev) {
  nn::init::ParameterScope where(dev, dt);
  if (arch == "llama") {
    nn::Llama m(nn::LlamaConfig::preset(model));
    nn::save_hf_llama(m, dir, {.dtype = dt});
  } else {
    nn::GPT m(nn::GPTConfig::gpt2(model));
    nn::save_hf_gpt2(m, dir, {.dtype = dt});
  }
}

// load_hf_gpt2's / load_hf_llama's steps, timed apart: the model made in place (on the device, in
// the dtype, uninitialised), then the weights copied in. Returns the parameter count.
int64_t load_timed(const std::string& dir, Device dev, DType dt, double& build_s, double& copy_s) {
  auto t0 = Clock::now();
  nn::HfCheckpoint ckpt(dir);
  const std::string type = ckpt.config().string("model_type", "");
  const bool llama = nn::is_llama_family(type);
  std::shared_ptr<nn::Module> model;
  {
    nn::init::ParameterScope where(dev, dt, /*skip_init=*/true);
    if (llama)
      model = std::make_shared<nn::Llama>(nn::llama_config_from_hf(ckpt.config()));
    else
      model = std::make_shared<nn::GPT>(nn::gpt2_config_from_hf(ckpt.config()));
  }
  auto t1 = Clock::now();
  if (llama)
    nn::load_hf_llama_into(static_cast<nn::Llama&>(*model), ckpt);
  else
    nn::load_hf_gpt2_into(static_cast<nn::GPT&>(*model), ckpt);
  if (dev.is_cuda()) cuda::synchronize(dev.index);
  auto t2 = Clock::now();
  build_s = std::chrono::duration<double>(t1 - t0).count();
  copy_s = std::chrono::duration<double>(t2 - t1).count();
  int64_t n = 0;
  for (const Tensor& p : model->parameters()) n += p.numel();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, make, arch = "gpt2", model = "d12", dtype = "f32", device = "cpu";
  CLI::App app{"Time loading a Hugging Face GPT-2 or Llama folder"};
  app.add_option("dir", dir, "the folder to load");
  app.add_option("--make", make, "write a random folder here instead, then exit");
  app.add_option("--arch", arch, "with --make: gpt2 or llama")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--model,--depth", model,
                 "with --make: GPT-2's d12 (124M), d24, d36, d48; a Llama preset (llama3-8b...)");
  app.add_option("--dtype", dtype, "the file's dtype (--make) or the model's (loading)");
  app.add_option("--device", device, "cpu or cuda (--make: where the random weights are drawn)");
  CLI11_PARSE(app, argc, argv);
  try {
    LOOM_CHECK(device == "cpu" || cuda::is_available(), "bench_hf_load: no GPU for --device ",
               device);
    Device dev = device == "cpu" ? kCPU : cuda_device(0);
    const DType dt = parse_dtype(dtype);
    if (!make.empty()) {
      auto t0 = Clock::now();
      make_folder(arch, model, make, dt, dev);
      std::printf("wrote %s: %s %s, %.1f MiB of %s weights in %.1f s\n", make.c_str(), arch.c_str(),
                  model.c_str(), folder_mib(make), dtype.c_str(),
                  std::chrono::duration<double>(Clock::now() - t0).count());
      return 0;
    }
    LOOM_CHECK(!dir.empty(), "bench_hf_load: give a folder to load (or --make DIR)");
    double before = status_mib("VmRSS"), build_s = 0, copy_s = 0;
    const int64_t n = load_timed(dir, dev, dt, build_s, copy_s);
    double params_mib = double(n) * double(dtype_size(dt)) / (1 << 20);
    std::printf(
        "%s (%.1f MiB of weights) -> %s %s: %.3f s (config, mapping and the model made in "
        "place: %.3f s; copying the weights %.3f s); parameters %.1f MiB; resident "
        "memory %.1f MiB before, %.1f MiB after, peak %.1f MiB\n",
        dir.c_str(), folder_mib(dir), device.c_str(), dtype.c_str(), build_s + copy_s, build_s,
        copy_s, params_mib, before, status_mib("VmRSS"), status_mib("VmHWM"));
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
