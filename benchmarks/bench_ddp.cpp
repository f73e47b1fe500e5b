// bench_ddp: the DDP workloads of docs/workloads.md: each process trains mlp, cnn or wide on its
// own GPU (same per-GPU batch as bench_train; Adam lr 1e-3, strict fp32, or with --amp bf16
// autocast to bfloat16 with float32 master weights; those rows are named mlp_bf16, ...), wrapped in
// DistributedDataParallel when there is more than one process. Prints, per workload, the median
// ms/step (rank 0, 5 x 50 steps after 10 warm-up), the per-rank step breakdown from CUDA events
// (train/step_profile.h), the all-reduce of all buckets timed alone, and one RESULT line for
// scripts/gpu-ddp.sh. Launch it with loomrun: scaling efficiency is t(1 GPU) / t(k GPUs).
//
//   ./build/benchmarks/bench_ddp --workload mlp                          # one GPU, no DDP
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/benchmarks/bench_ddp
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "distributed/ddp/ddp.h"
#include "distributed/env.h"
#include "distributed/parallel/data_parallel_model.h"
#include "distributed/world.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/step_profile.h"
#include "train/step_runner.h"

using namespace loom;
namespace dist = loom::distributed;

namespace {

struct Workload {
  std::string name;
  int64_t batch;  // per GPU
  std::shared_ptr<nn::Sequential> (*make)();
};
std::shared_ptr<nn::Sequential> mlp() { return nn::make_mlp(); }
std::shared_ptr<nn::Sequential> cnn() { return nn::make_cnn(); }
std::shared_ptr<nn::Sequential> wide() { return nn::make_wide(); }

double now_synced(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The largest value over ranks (every rank passes its own).
double max_over_ranks(dist::ProcessGroup& pg, double v, Device dev) {
  if (pg.size() == 1) return v;
  Tensor t = full({1}, v, {.dtype = kF64, .device = dev});
  pg.all_reduce(t, dist::ReduceOp::Max)->wait();
  return t.item();
}

void run(const Workload& w, dist::ProcessGroup& pg, Device dev, int warmup, int steps, int repeats,
         const std::string& comm, bool bf16) {
  const std::string name = bf16 ? w.name + "_bf16" : w.name;
  manual_seed(0);
  auto model = w.make();
  nn::fuse(*model);  // the fused Linear + ReLU and BatchNorm2d + ReLU (+ MaxPool2d(2)) modules
  model->to(dev);
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  dist::DDPOptions o;
  if (comm == "bf16") o.reducer.comm_dtype = kBF16;
  if (pg.size() > 1) ddp = std::make_shared<dist::DistributedDataParallel>(model, nullptr, o);
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  manual_seed(1 + uint64_t(pg.rank()));  // each rank its own batch
  Tensor x = randn({w.batch, 1, 28, 28}, {.device = dev});
  Tensor y = randint(0, 10, {w.batch}, {.dtype = kI64, .device = dev});
  std::unique_ptr<dist::ParallelModel> parallel;
  if (ddp)
    parallel = std::make_unique<dist::DDPModel>(ddp, opt);
  else
    parallel = std::make_unique<dist::LocalModel>(*model, opt);
  train::StepRunner runner(*parallel, 0.0, false);
  if (bf16) runner.set_amp(kBF16, nullptr);
  for (int i = 0; i < warmup; ++i) runner.step(x, y);
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    double t0 = now_synced(dev);
    for (int i = 0; i < steps; ++i) runner.step(x, y);
    double t1 = now_synced(dev);
    ms.push_back((t1 - t0) * 1e3 / steps);
  }
  double step_ms = max_over_ranks(pg, median(ms), dev);

  // Where the time goes (one host sync per step while profiling).
  train::StepProfiler prof(dev);
  runner.set_profiler(&prof);
  if (ddp)
    ddp->reducer().set_backward_computed_hook(
        [&] { prof.mark(train::StepProfiler::BackwardComputed); });
  for (int i = 0; i < steps; ++i) {
    prof.mark(train::StepProfiler::StepBegin);
    prof.mark(train::StepProfiler::DataReady);
    runner.step(x, y);
    prof.end_step();
  }
  runner.set_profiler(nullptr);
  if (ddp) ddp->reducer().set_backward_computed_hook(nullptr);
  std::printf("profile %s %s\n", name.c_str(), prof.summary(pg.rank()).c_str());
  double exposed = max_over_ranks(pg, prof.totals().allreduce_exposed / double(steps), dev);

  // The buckets' all-reduces alone, back to back as DDP launches them: the communication that
  // backward has to hide.
  double comm_ms = 0;
  if (ddp) {
    auto buckets = ddp->reducer().bucket_tensors();
    std::vector<double> c;
    for (int r = 0; r < 20; ++r) {
      double t0 = now_synced(dev);
      std::vector<std::shared_ptr<dist::Work>> works;
      for (auto& b : buckets) works.push_back(pg.all_reduce(b, dist::ReduceOp::Sum));
      for (auto& wk : works) wk->wait();
      double t1 = now_synced(dev);
      c.push_back((t1 - t0) * 1e3);
    }
    comm_ms = max_over_ranks(pg, median(c), dev);
  }
  double hidden = comm_ms > 0 ? std::clamp(1.0 - exposed / comm_ms, 0.0, 1.0) : 1.0;
  if (pg.rank() == 0) {
    std::printf(
        "%-6s gpus %d  %9.3f ms/step  all-reduce alone %8.3f ms  exposed %8.3f ms  hidden "
        "%5.1f%%\n",
        name.c_str(), pg.size(), step_ms, comm_ms, exposed, 100 * hidden);
    std::printf("RESULT loom %s %d %.4f %.4f %.4f\n", name.c_str(), pg.size(), step_ms, comm_ms,
                exposed);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom DDP training-step benchmark (docs/workloads.md), one process per GPU"};
  std::string workload = "all", device, comm = "fp32", amp = "off";
  int warmup = 10, steps = 50, repeats = 5;
  app.add_option("--workload", workload, "mlp, cnn, wide or all")
      ->check(CLI::IsMember({"mlp", "cnn", "wide", "all"}));
  app.add_option("--device", device, "cpu or cuda (default: cuda:LOCAL_RANK if present)");
  app.add_option("--warmup", warmup, "warm-up steps")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "timed steps per repeat")->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "repeats (the median is reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--comm", comm, "gradient communication dtype: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--amp", amp, "off, or bf16: autocast to bfloat16 (float32 master weights)")
      ->check(CLI::IsMember({"off", "bf16"}));
  CLI11_PARSE(app, argc, argv);
  try {
    dist::JobEnv env = dist::job_env();
    Device dev = kCPU;
    if ((device.empty() || device == "cuda") && cuda::is_available())
      dev = cuda_device(env.local_rank % cuda::device_count());
    else if (!device.empty())
      dev = Device(device);
    dist::InitOptions io;
    io.backend = dev.is_cuda() ? "nccl" : "gloo";
    if (dev.is_cuda()) io.device = dev.index;
    auto pg = dist::init_process_group(io);
    if (pg->rank() == 0)
      std::printf("bench_ddp: %d process(es), %s, %s gradients\n", pg->size(), dev.str().c_str(),
                  comm.c_str());
    std::vector<Workload> all = {{"mlp", 256, &mlp}, {"cnn", 256, &cnn}, {"wide", 2048, &wide}};
    for (const Workload& w : all)
      if (workload == "all" || workload == w.name)
        run(w, *pg, dev, warmup, steps, repeats, comm, amp == "bf16");
    dist::destroy_process_group();
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", e.what());
    return 1;
  }
  return 0;
}
