// The run's device, process group and up-front checks. See run_setup.h.
#include "train/run_setup.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>

#include "autograd/recompute.h"
#include "core/cuda/available.h"
#include "core/error.h"
#include "core/generator.h"
#include "distributed/world.h"

namespace loom::train {

namespace fs = std::filesystem;
namespace dist = loom::distributed;

Device pick_device(const std::string& spec, const dist::JobEnv& env) {
  int n = cuda::device_count();
  if ((spec.empty() && n > 0) || (spec == "cuda" && n > 0))
    return cuda_device(env.world_size > 1 ? env.local_rank % n : 0);
  if (spec.empty()) return kCPU;
  Device d(spec);
  if (d.is_cuda()) {
    LOOM_CHECK(cuda::compiled_with_cuda(), "--device ", spec,
               ": this build of loom has no CUDA support");
    LOOM_CHECK(d.index < n, "--device ", spec, ": ",
               n == 0 ? std::string("no usable CUDA device (run envinfo to see why)")
                      : str("this machine has ", n, " CUDA device(s), cuda:0 to cuda:", n - 1));
  }
  return d;
}

// A bad folder is an error before the first step, not after an epoch of training.
void check_writable_dir(const char* flag, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, flag, " ", dir, ": cannot create the folder: ", ec.message());
  std::string probe = (fs::path(dir) / ".loom-write-test-XXXXXX").string();
  int fd = ::mkstemp(probe.data());
  LOOM_CHECK(fd >= 0, flag, " ", dir, ": cannot write in the folder: ", std::strerror(errno));
  ::close(fd);
  fs::remove(probe, ec);
}

ProcessGroupScope::ProcessGroupScope(Device device) : own_(!dist::is_initialized()) {
  if (!own_) return;
  dist::InitOptions io;
  io.backend = device.is_cuda() ? "nccl" : "gloo";
  if (device.is_cuda()) io.device = device.index;
  dist::init_process_group(io);
}

ProcessGroupScope::~ProcessGroupScope() {
  if (own_) dist::destroy_process_group();
}

namespace {

// Flags that do not fit together or with this job; run once the device and world are known.
// --pp-schedule interleaved and --pp-virtual-stages (Note [Interleaved 1F1B] in
// distributed/pipeline/interleaved_schedule.h): V >= 2 chunks per process, the micro-batches in
// groups of --pp; the other schedules one stage per process.
void check_pipeline_schedule(const TrainConfig& cfg) {
  if (cfg.pp_schedule != "interleaved") {
    LOOM_CHECK(cfg.pp_virtual_stages == 1, "--pp-virtual-stages ", cfg.pp_virtual_stages,
               " needs --pp-schedule interleaved (got --pp-schedule ", cfg.pp_schedule,
               ", which runs one stage per process)");
    return;
  }
  LOOM_CHECK(cfg.pp >= 2 && cfg.pp_virtual_stages >= 2,
             "--pp-schedule interleaved needs --pp 2 or more and --pp-virtual-stages 2 or more "
             "(got --pp ",
             cfg.pp, ", --pp-virtual-stages ", cfg.pp_virtual_stages, ")");
  LOOM_CHECK(cfg.grad_accum % cfg.pp == 0, "--pp-schedule interleaved runs the micro-batches in ",
             "groups of --pp: --grad-accum ", cfg.grad_accum, " is not a multiple of --pp ",
             cfg.pp);
}

void check_run_flags(const TrainConfig& cfg, Device dev, int world, const std::string& backend) {
  LOOM_CHECK(!cfg.resume || !cfg.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  // Before the device check: on the CPU the reason that matters is the backend's.
  LOOM_CHECK(!cfg.cuda_graph || world == 1 || backend == "nccl", "--cuda-graph with ", world,
             " processes over ", backend, ": ", backend,
             " runs each all-reduce on host threads over CPU tensors, so DDP's step has no GPU "
             "work for a CUDA graph to capture (Note [DDP and CUDA graphs] in "
             "distributed/ddp/ddp.cpp). NCCL's all-reduces are captured: run on CUDA devices "
             "(loomrun's workers then use nccl), or drop --cuda-graph");
  LOOM_CHECK(!cfg.cuda_graph || cfg.zero != 3,
             "--cuda-graph with --zero 3: FullyShardedDataParallel allocates, gathers and frees "
             "each unit's parameters around its forward and backward, which a replayed graph "
             "cannot repeat (its addresses are fixed at capture); drop one of the two flags");
  LOOM_CHECK(cfg.pp == 1 || !cfg.cuda_graph, "--pp ", cfg.pp,
             ": a pipeline runs without --cuda-graph for now (the schedule's sends and receives "
             "are not captured yet)");
  LOOM_CHECK(!cfg.cuda_graph || dev.is_cuda(), "--cuda-graph needs a CUDA device, got --device ",
             dev);
  // A typo in the folder must not silently retrain from scratch.
  LOOM_CHECK(!cfg.resume || fs::is_directory(cfg.checkpoint_dir),
             "--resume: the checkpoint folder '", cfg.checkpoint_dir,
             "' does not exist (leave out --resume to start a new run)");
  if (!cfg.checkpoint_dir.empty()) check_writable_dir("--checkpoint-dir", cfg.checkpoint_dir);
  if (!cfg.log_dir.empty()) check_writable_dir("--log-dir", cfg.log_dir);
  LOOM_CHECK(!cfg.profile || !cfg.cuda_graph,
             "--profile times the phases of the eager step; with "
             "--cuda-graph the step is one replay (drop one of the two flags)");
  LOOM_CHECK(cfg.tp >= 1 && cfg.pp >= 1 && world % (cfg.tp * cfg.pp) == 0, "--tp ", cfg.tp,
             " x --pp ", cfg.pp, " does not divide the ", world, " processes");
  check_pipeline_schedule(cfg);
  const int replicas = world / (cfg.tp * cfg.pp);  // the processes that read different data
  const std::string readers = cfg.tp * cfg.pp == 1 ? " processes" : " data-parallel replicas";
  LOOM_CHECK(cfg.batch_size % replicas == 0, "--batch-size ", cfg.batch_size,
             " is the global batch and must be divisible by the ", replicas, readers);
  LOOM_CHECK(cfg.grad_accum >= 1 && (cfg.batch_size / replicas) % cfg.grad_accum == 0,
             "--grad-accum ", cfg.grad_accum, " must divide each ",
             cfg.tp * cfg.pp == 1 ? "process's" : "replica's", " batch of ",
             cfg.batch_size / replicas, " examples (--batch-size ", cfg.batch_size, " over ",
             replicas, readers, ") into equal micro-batches");
}

int64_t checked_local_batch(const TrainConfig& cfg, Device dev, int world,
                            const std::string& backend) {
  check_run_flags(cfg, dev, world, backend);
  return cfg.batch_size / (world / (cfg.tp * cfg.pp));
}

}  // namespace

RunSetup::RunSetup(const TrainConfig& cfg)
    : start_seconds(steady_seconds()),
      env(dist::job_env()),
      device(pick_device(cfg.device, env)),
      group_(device),
      pg(dist::world()),
      rank(pg->rank()),
      world(pg->size()),
      local_batch(checked_local_batch(cfg, device, world, pg->backend())),
      replicas(world / (cfg.tp * cfg.pp)),
      replica((rank / cfg.tp) % replicas) {  // Note [Mesh layout]: {pp, dp, tp}
  manual_seed(cfg.seed);
  autograd::set_recompute_activations(cfg.recompute_activations);  // Note [Recomputed activations]
}

distributed::ParallelPlan parallel_plan(const TrainConfig& cfg) {
  distributed::ParallelPlan plan{
      .zero = cfg.zero,
      .tp = cfg.tp,
      .sequence_parallel = cfg.sequence_parallel,
      .pp = cfg.pp,
      .pp_schedule = cfg.pp_schedule == "gpipe"         ? distributed::PipelineSchedule::GPipe
                     : cfg.pp_schedule == "interleaved" ? distributed::PipelineSchedule::Interleaved
                                                        : distributed::PipelineSchedule::OneFOneB,
      .pp_virtual_stages = cfg.pp_virtual_stages};
  // Under --pp the schedule's autocast computes in bf16 (FSDP gathers in float32 there).
  if (cfg.zero == 3 && cfg.amp == "bf16" && cfg.pp == 1) plan.fsdp_param_dtype = kBF16;
  return plan;
}

// Drops what non-zero ranks would print (progress bars).
static std::ostream& null_stream() {
  static std::ostream s(nullptr);
  return s;
}

ProgressOptions RunSetup::progress_options() const {
  ProgressOptions popt;
  if (!main()) popt.out = &null_stream();
  if (world > 1) popt.style = ProgressStyle::Lines;  // the same read-back steps on every rank
  return popt;
}

}  // namespace loom::train
