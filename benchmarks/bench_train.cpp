// bench_train: the training-step workloads of docs/workloads.md (mlp, cnn, wide) with their
// timing protocol: one step = zero grads, forward, cross-entropy, backward, Adam(lr 1e-3) update,
// on random inputs already on the device; warm up, then time `steps` steps, `repeats` times, and
// report the median ms/step and the peak device memory. Strict fp32 (TF32 off). --cuda-graph
// replays zero-grad + forward + backward as one graph (see train/step_runner.h).
//
//   ./build/benchmarks/bench_train                       # every workload on the default device
//   ./build/benchmarks/bench_train --workload mlp --device cpu --steps 10 --repeats 3
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

struct Workload {
  std::string name;
  int64_t batch;
  std::shared_ptr<nn::Sequential> (*make)();
};

std::shared_ptr<nn::Sequential> mlp() { return nn::make_mlp(); }
std::shared_ptr<nn::Sequential> cnn() { return nn::make_cnn(); }
std::shared_ptr<nn::Sequential> wide() { return nn::make_wide(); }

// Seconds since an arbitrary start, after all queued device work finished.
double now_synced(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
  (void)d;
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Result {
  double median_ms = 0, min_ms = 0;
  double peak_mib = 0;
};

Result run(const Workload& w, Device dev, int warmup, int steps, int repeats, bool graph) {
  manual_seed(0);
  auto model = w.make();
  model->to(dev);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  Tensor x = randn({w.batch, 1, 28, 28}, {.device = dev});
  Tensor y = randint(0, 10, {w.batch}, {.dtype = kI64, .device = dev});
  train::StepRunner runner(*model, opt, 0.0, graph);  // eager, or a replayed CUDA graph
  auto step = [&] { runner.step(x, y); };
  for (int i = 0; i < warmup; ++i) step();
  if (dev.is_cuda()) cuda::reset_peak_memory_stats(dev.index);
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    double t0 = now_synced(dev);
    for (int i = 0; i < steps; ++i) step();
    double t1 = now_synced(dev);
    ms.push_back((t1 - t0) * 1e3 / steps);
  }
  std::sort(ms.begin(), ms.end());
  Result res{ms[ms.size() / 2], ms.front(), 0};
  if (dev.is_cuda()) res.peak_mib = double(cuda::memory_stats(dev.index).peak_allocated) / (1 << 20);
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom training-step benchmark (WORKLOADS.md)"};
  std::string workload = "all", device;
  int warmup = 10, steps = 50, repeats = 5;
  bool graph = false;
  app.add_option("--workload", workload, "mlp, cnn, wide or all")->check(CLI::IsMember({"mlp", "cnn", "wide", "all"}));
  app.add_option("--device", device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--warmup", warmup, "warm-up steps")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "repeats (the median is reported)")->check(CLI::PositiveNumber);
  app.add_flag("--cuda-graph", graph, "replay the step as a CUDA graph (zero-grad, forward, backward)");
  CLI11_PARSE(app, argc, argv);

  Device dev = kCPU;
  if (device.empty() && cuda::is_available()) dev = cuda_device(0);
  try {
    if (!device.empty()) dev = Device(device);
    std::vector<Workload> all = {{"mlp", 256, &mlp}, {"cnn", 256, &cnn}, {"wide", 2048, &wide}};
    std::printf("%-6s %-8s %-6s %6s %12s %12s %14s\n", "model", "device", "mode", "batch", "ms/step", "min ms",
                "peak MiB");
    for (const Workload& w : all) {
      if (workload != "all" && workload != w.name) continue;
      Result r = run(w, dev, warmup, steps, repeats, graph);
      std::printf("%-6s %-8s %-6s %6ld %12.3f %12.3f %14.1f\n", w.name.c_str(), dev.str().c_str(),
                  graph ? "graph" : "eager", long(w.batch), r.median_ms, r.min_ms, r.peak_mib);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
