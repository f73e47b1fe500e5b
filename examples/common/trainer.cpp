// The shared training loop of the example programs. See trainer.h.
#include "examples/common/trainer.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "autograd/anomaly.h"
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/ddp/ddp.h"
#include "distributed/env.h"
#include "distributed/world.h"
#include "nn/amp/grad_scaler.h"
#include "nn/checkpoint.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "train/flags.h"
#include "train/progress.h"
#include "train/step_profile.h"
#include "train/step_runner.h"
#include "train/stop_signal.h"
#include "train/tensorboard.h"

namespace loom::examples {

namespace fs = std::filesystem;
using namespace loom::train;

void add_train_flags(CLI::App& app, TrainConfig& c) {
  configure_app(app);  // before any option: --help shows the defaults
  app.add_option("--device", c.device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->check(int_range(1, 1000000));
  app.add_option("--batch-size", c.batch_size,
                 "examples per step over all processes (each of N processes takes 1/N)")
      ->check(int_range(1, 1 << 24));
  app.add_option("--lr", c.lr, "learning rate")->check(real_range(0, 1e3, true));
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(real_range(0, 1e3));
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing")
      ->check(real_range(0, 0.99));
  app.add_option("--seed", c.seed, "seed of initialisation, shuffling and augmentation");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST idx files");
  app.add_option("--workers", c.workers,
                 "data-loading worker threads (at most 4 per hardware thread)")
      ->check(int_range(0, max_workers()));
  app.add_option("--log-dir", c.log_dir, "write TensorBoard event files here");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--keep-last", c.keep_last, "checkpoints to keep")->check(int_range(1, 1000000));
  app.add_flag("--resume", c.resume,
               "continue from the newest valid checkpoint in --checkpoint-dir (which must exist)");
  app.add_flag("--cuda-graph", c.cuda_graph,
               "capture the whole training step as a CUDA graph and replay it");
  app.add_option("--train-limit", c.train_limit, "train on the first N images only (0: all)")
      ->check(int_range(0, int64_t(1) << 40));
  app.add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")
      ->check(int_range(0, int64_t(1) << 50));
  app.add_option("--log-every", c.log_every, "read the loss back every N steps")
      ->check(int_range(1, 1000000));
  app.add_flag("--allow-nonfinite", c.allow_nonfinite,
               "keep training when the loss is nan or inf (default: stop)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "also save a checkpoint every N steps (0: per epoch only)")
      ->check(int_range(0, int64_t(1) << 50));
  app.add_flag("--detect-anomaly", c.detect_anomaly,
               "stop at the first NaN or Inf made in forward or backward, naming the op and the "
               "module whose forward made it (slow: reads every op's output back)");
  app.add_flag("--profile", c.profile,
               "print each process's step-time breakdown (data, forward, backward, exposed "
               "all-reduce, optimizer)");
  app.add_option("--amp", c.amp,
                 "mixed precision: off, bf16 (autocast) or fp16 (autocast and loss scaling)")
      ->check(CLI::IsMember({"off", "bf16", "fp16"}));
}

int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: out of host memory\n", program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  }
  return 1;
}

namespace {

namespace dist = loom::distributed;

// One GPU per process: cuda:LOCAL_RANK under a launcher (when --device is empty or "cuda"); an
// explicit cuda:N is checked against this machine.
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

// Creates `dir` if needed and checks that a file can be written in it, so that a bad folder is an
// error before the first step, not after an epoch of training.
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

// Checks what a checkpoint holds against this run before anything is loaded: the counters are in
// range, the sampler position lies inside an epoch, and every model tensor has the model's dtype
// (load_state_dict would cast silently). Errors name the file.
void check_resume_state(const TrainingState& st, const nn::StateDict& model_sd,
                        int64_t steps_per_epoch, int64_t epoch_size, const TrainConfig& cfg) {
  const std::string where = "checkpoint '" + st.source + "'";
  int64_t epoch = st.extra_int("epoch"), step = st.extra_int("step"),
          position = st.extra_int("position");
  LOOM_CHECK(epoch >= 0 && step >= 0 && position >= 0, where, ": negative counters (epoch ", epoch,
             ", step ", step, ", position ", position, ")");
  LOOM_CHECK(epoch <= cfg.epochs, where, ": epoch ", epoch, " is beyond this run's --epochs ",
             cfg.epochs);
  LOOM_CHECK(epoch < cfg.epochs, where, ": the run is complete (", epoch, " of --epochs ",
             cfg.epochs, " epochs done): nothing to train; raise --epochs to train further");
  LOOM_CHECK(cfg.max_steps == 0 || step < cfg.max_steps, where, ": step ", step,
             " is not below --max-steps ", cfg.max_steps, ": nothing to train");
  LOOM_CHECK(position <= epoch_size, where, ": sampler position ", position,
             " is beyond the epoch of ", epoch_size,
             " examples (saved with another dataset or --train-limit?)");
  LOOM_CHECK(step <= (epoch + 1) * steps_per_epoch, where, ": step ", step,
             " is beyond what epoch ", epoch + 1, " can reach (", steps_per_epoch,
             " steps per epoch; saved with another --batch-size?)");
  std::map<std::string, DType> want;
  for (const auto& [name, t] : model_sd) want[name] = t.dtype();
  for (const auto& [name, t] : st.model) {
    auto it = want.find(name);
    LOOM_CHECK(it == want.end() || it->second == t.dtype(), where, ": model tensor '", name,
               "' is ", dtype_name(t.dtype()), " but the model's is ", dtype_name(it->second));
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(
        params, optim::SGDOptions{.lr = c.lr, .momentum = 0.9, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  return std::make_unique<optim::Adam>(
      params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

// Test loss and accuracy over the whole test set: each process evaluates its exactly-once share
// (Note [Sharded evaluation]); the sums are all-reduced and read back once.
std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader,
                                   dist::ProcessGroup& pg, Device dev) {
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum = zeros({1}, {.dtype = kF64, .device = dev}),
         correct = zeros({1}, {.dtype = kF64, .device = dev});
  int64_t n = 0;
  for (auto& b : loader) {
    Tensor logits = model(b.data);
    loss_sum = loss_sum + cross_entropy(logits, b.target, Reduction::Sum).to(kF64);
    correct = correct + eq(argmax(logits, 1), b.target).to(kF64).sum();
    n += b.data.size(0);
  }
  model.train();
  Tensor sums = cat({loss_sum, correct, full({1}, double(n), {.dtype = kF64, .device = dev})}, 0);
  if (pg.size() > 1) pg.all_reduce(sums, dist::ReduceOp::Sum)->wait();
  std::vector<double> h = sums.to(kCPU).to_vector<double>();
  return {h[0] / h[2], h[1] / h[2]};
}

// Drops what non-zero ranks would print (progress bars).
std::ostream& null_stream() {
  static std::ostream s(nullptr);
  return s;
}

}  // namespace

// Note [Data-parallel training loop]
// Under a launcher (WORLD_SIZE > 1) every process trains a replica: its own GPU (cuda:LOCAL_RANK,
// NCCL) or CPU process (Gloo), the model wrapped in DistributedDataParallel. --batch-size is the
// global batch; each process takes batch/N rows of it. The training sampler is a
// DistributedSampler (shuffled with seed + epoch, drop_last): rank r's j-th batch holds the
// samples at positions [j * batch, (j + 1) * batch) of the epoch's permutation that are = r mod N,
// so the union over ranks of step j's batches is exactly step j's batch of a single-process run.
// Checkpoints store the global sample position (batches done x global batch), so a run saved with
// N processes resumes with M (M must divide the global batch) and continues the same batch order.
// Rank 0 writes checkpoints (then all wait at a barrier), prints and logs to TensorBoard; every
// rank loads the checkpoint onto its own device. Without a launcher it is a world of one: no
// wrapper, no communication.
TrainReport train_classifier(const std::shared_ptr<nn::Module>& model, const TrainConfig& cfg,
                             std::shared_ptr<const data::Transform> train_transform) {
  double t_start = steady_seconds();
  dist::JobEnv env = dist::job_env();
  Device dev = pick_device(cfg.device, env);
  bool own_group = !dist::is_initialized();
  if (own_group) {
    dist::InitOptions io;
    io.backend = dev.is_cuda() ? "nccl" : "gloo";
    if (dev.is_cuda()) io.device = dev.index;
    dist::init_process_group(io);
  }
  struct GroupGuard {
    bool own;
    ~GroupGuard() {
      if (own) dist::destroy_process_group();
    }
  } group_guard{own_group};
  auto pg = dist::world();
  const int rank = pg->rank(), world = pg->size();
  const bool main = rank == 0;
  LOOM_CHECK(!cfg.resume || !cfg.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  LOOM_CHECK(!cfg.cuda_graph || dev.is_cuda(), "--cuda-graph needs a CUDA device, got --device ",
             dev);
  // A typo in the folder must not silently retrain from scratch.
  LOOM_CHECK(!cfg.resume || fs::is_directory(cfg.checkpoint_dir),
             "--resume: the checkpoint folder '", cfg.checkpoint_dir,
             "' does not exist (leave out --resume to start a new run)");
  if (!cfg.checkpoint_dir.empty()) check_writable_dir("--checkpoint-dir", cfg.checkpoint_dir);
  if (!cfg.log_dir.empty()) check_writable_dir("--log-dir", cfg.log_dir);
  LOOM_CHECK(
      !cfg.cuda_graph || world == 1, "--cuda-graph with ", world,
      " processes: the distributed step "
      "runs eagerly (see Note [DDP and CUDA graphs] in docs/ddp.md: the process group's watchdog "
      "cannot track collectives inside a captured graph); drop --cuda-graph");
  LOOM_CHECK(!cfg.profile || !cfg.cuda_graph,
             "--profile times the phases of the eager step; with "
             "--cuda-graph the step is one replay (drop one of the two flags)");
  LOOM_CHECK(cfg.batch_size % world == 0, "--batch-size ", cfg.batch_size,
             " is the global batch and must "
             "be divisible by the ",
             world, " processes");
  const int64_t local_batch = cfg.batch_size / world;
  manual_seed(cfg.seed);

  // Data: Fashion-MNIST, normalised, as (N, 1, 28, 28) float32 and int64 labels.
  auto train_set = std::make_shared<data::FashionMNIST>(cfg.data_dir, true);
  auto test_set = std::make_shared<data::FashionMNIST>(cfg.data_dir, false);
  std::shared_ptr<const data::Dataset> train_data = train_set;
  if (cfg.train_limit > 0 && cfg.train_limit < train_set->size()) {
    auto all = train_set->to_tensor_dataset();
    train_data = std::make_shared<data::TensorDataset>(all.data().slice(0, 0, cfg.train_limit),
                                                       all.target().slice(0, 0, cfg.train_limit));
  }
  auto train_sampler = std::make_shared<data::DistributedSampler>(
      train_data->size(), data::DistributedSamplerOptions{.num_replicas = world,
                                                          .rank = rank,
                                                          .shuffle = true,
                                                          .seed = cfg.seed,
                                                          .drop_last = true});
  data::DataLoader train_loader(train_data, train_sampler,
                                {.batch_size = local_batch,
                                 .drop_last = true,
                                 .num_workers = cfg.workers,
                                 .device = dev,
                                 .seed = cfg.seed,
                                 .transform = train_transform});
  // Note [Sharded evaluation]: no padding, so every test image is counted once over all ranks.
  auto test_sampler = std::make_shared<data::DistributedSampler>(
      test_set->size(),
      data::DistributedSamplerOptions{
          .num_replicas = world, .rank = rank, .shuffle = false, .exactly_once = true});
  data::DataLoader test_loader(test_set, test_sampler,
                               {.batch_size = 1000, .num_workers = cfg.workers, .device = dev});
  const int64_t steps_per_epoch = train_loader.size();
  LOOM_CHECK(steps_per_epoch > 0, "no training step: ", train_data->size(),
             " training examples make no full batch of ", "--batch-size ", cfg.batch_size,
             world > 1 ? str(" over ", world, " processes") : std::string(),
             " (the last partial batch is dropped); lower --batch-size",
             cfg.train_limit > 0 ? " or raise --train-limit" : "");
  LOOM_CHECK(test_set->size() > 0, "no test examples in ", cfg.data_dir);

  model->to(dev);
  model->train();

  // Resume: model, optimizer, RNG and the global position in the epoch (every rank reads the file).
  int64_t step = 0;
  std::optional<TrainingState> resumed;
  if (cfg.resume) {
    resumed = load_latest_checkpoint(cfg.checkpoint_dir);
    if (resumed) {
      check_resume_state(*resumed, model->state_dict(), steps_per_epoch, train_data->size(), cfg);
      model->load_state_dict(resumed->model);
      restore_default_rng(*resumed);
      step = resumed->extra_int("step");
      if (resumed->extra.count("global_batch"))
        LOOM_CHECK(resumed->extra_int("global_batch") == cfg.batch_size,
                   "--resume: ", resumed->source, " was written with a global batch of ",
                   resumed->extra_int("global_batch"), ", this run has --batch-size ",
                   cfg.batch_size, "; keep the global batch to continue the same run");
      int64_t position = resumed->extra_int("position");  // global samples done in the epoch
      LOOM_CHECK(position % world == 0, "--resume: ", resumed->source, " stopped at sample ",
                 position, " of its epoch, which ", world, " processes cannot split evenly");
      train_loader.load_state({resumed->extra_int("epoch"), position / world});
      if (main)
        std::printf("resumed from %s (epoch %ld, step %ld, written by %ld process(es), now %d)\n",
                    resumed->source.c_str(), long(resumed->extra_int("epoch") + 1), long(step),
                    long(resumed->extra.count("world_size") ? resumed->extra_int("world_size") : 1),
                    world);
    } else if (list_checkpoints(cfg.checkpoint_dir).empty()) {
      if (main)
        std::printf("no checkpoint in %s yet: starting a new run\n", cfg.checkpoint_dir.c_str());
    } else {
      LOOM_FAIL("--resume: no checkpoint in '", cfg.checkpoint_dir,
                "' is valid (each was skipped above, with the reason); move them away to start a "
                "new run");
    }
  }
  // The replica: rank 0's weights and buffers everywhere, gradients averaged over ranks.
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (world > 1) ddp = std::make_shared<dist::DistributedDataParallel>(model, pg);
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  auto opt = make_optimizer(cfg, model->parameters());
  if (resumed) opt->load_state_dict(resumed->optimizer);
  // Mixed precision: autocast in the step; float16 also scales the loss (docs/amp.md). A
  // checkpoint written without a scaler (an older one, or another --amp) leaves the scaler new.
  std::optional<DType> amp_dtype;
  if (cfg.amp == "bf16") amp_dtype = DType::BF16;
  if (cfg.amp == "fp16") amp_dtype = DType::F16;
  amp::GradScaler scaler(amp::GradScalerOptions{.enabled = cfg.amp == "fp16"});
  if (resumed && scaler.is_enabled() && !resumed->scaler.empty())
    scaler.load_state_dict(resumed->scaler);

  std::unique_ptr<SummaryWriter> tb;
  if (main && !cfg.log_dir.empty()) tb = std::make_unique<SummaryWriter>(cfg.log_dir);
  // Note [Log write failures]: TensorBoard logs are a convenience; a write that fails later
  // (a full disk) is reported once and logging stops, while training goes on. Checkpoints are
  // not: a failed save is an error (and the previous checkpoint stays, core/atomic_file.h).
  auto tb_write = [&](const std::function<void(SummaryWriter&)>& write) {
    if (!tb) return;
    try {
      write(*tb);
    } catch (const Error& e) {
      std::fprintf(stderr, "warning: TensorBoard logging stops, training goes on: %s\n", e.what());
      tb.reset();
    }
  };
  if (main)
    std::printf("training %s on %s%s: %ld examples, batch %ld%s, %s lr %g%s\n",
                model->type_name().c_str(), dev.str().c_str(),
                world > 1
                    ? (" x " + std::to_string(world) + " processes (" + pg->backend() + ")").c_str()
                    : "",
                long(train_data->size()), long(cfg.batch_size),
                world > 1 ? (" (" + std::to_string(local_batch) + " per process)").c_str() : "",
                cfg.optimizer.c_str(), cfg.lr, amp_dtype ? (", amp " + cfg.amp).c_str() : "");
  if (main) std::fflush(stdout);  // these lines survive a kill (the output may be a file)

  TrainReport rep;
  rep.rank = rank;
  rep.world_size = world;
  std::optional<autograd::DetectAnomalyGuard> anomaly;
  if (cfg.detect_anomaly) anomaly.emplace(true);
  auto save = [&](int64_t epoch, int64_t global_position) -> std::string {
    if (cfg.checkpoint_dir.empty()) return "";
    std::string path;
    if (main) {
      TrainingState st;
      st.model = model->state_dict();
      st.optimizer = opt->state_dict();
      if (scaler.is_enabled()) st.scaler = scaler.state_dict();
      st.set_extra("epoch", epoch);
      st.set_extra("position", global_position);
      st.set_extra("step", step);
      st.set_extra("world_size", world);
      st.set_extra("global_batch", cfg.batch_size);
      st.rng["default"] = default_generator().state();
      path = save_checkpoint(cfg.checkpoint_dir, step, st, cfg.keep_last);
    }
    if (world > 1) pg->barrier()->wait();  // nobody reads or overwrites it before it is complete
    return path;
  };

  // Note [Preemption]
  // A SIGTERM or SIGINT (a preemption notice, Ctrl-C, or loomrun forwarding either) only sets a
  // flag (train/stop_signal.h); the step in flight finishes, a checkpoint of exactly that step is
  // written (the same state a --checkpoint-every save holds: model, optimizer, RNG, sampler
  // position), and train_classifier returns with stop_signal set; the program exits 128 + signal.
  // One process stops after the current step. N processes must stop after the same step (or the
  // ranks would block in different collectives), so the flag rides in the loss read-back's
  // all-reduce (Note [Loss read-back]): every rank reads back at the same steps, sums the flags
  // and stops when any rank got a signal. That costs no extra collective, and bounds the delay by
  // --log-every steps (a signal during evaluation stops the run at the end of the epoch, after one
  // all-reduce of the flag). loomrun's --grace must cover that many steps and a checkpoint save.
  StopSignal stop_signal;
  auto stop_everywhere = [&](int local) -> int {  // the same answer on every rank
    if (world == 1) return local;
    Tensor f = full({1}, double(local), {.dtype = kF64, .device = dev});
    pg->all_reduce(f, dist::ReduceOp::Max)->wait();
    return int(f.to(kCPU).item());
  };
  auto report_stop = [&](int sig, const std::string& when, std::string checkpoint) {
    rep.stop_signal = sig;
    rep.stop_checkpoint = std::move(checkpoint);
    if (!main) return;
    if (rep.stop_checkpoint.empty())
      std::printf("got %s: stopped after %s; nothing saved (no --checkpoint-dir)\n",
                  stop_signal_name(sig), when.c_str());
    else
      std::printf("got %s: stopped after %s and saved %s; run again with --resume to continue\n",
                  stop_signal_name(sig), when.c_str(), rep.stop_checkpoint.c_str());
    std::fflush(stdout);
  };

  StepRunner runner(net, *opt, cfg.label_smoothing, cfg.cuda_graph);
  runner.set_amp(amp_dtype, scaler.is_enabled() ? &scaler : nullptr);
  std::unique_ptr<StepProfiler> prof;
  if (cfg.profile) {
    prof = std::make_unique<StepProfiler>(dev);
    runner.set_profiler(prof.get());
    if (ddp)
      ddp->reducer().set_backward_computed_hook(
          [p = prof.get()] { p->mark(StepProfiler::BackwardComputed); });
  }
  ProgressOptions popt;
  if (!main) popt.out = &null_stream();
  if (world > 1) popt.style = ProgressStyle::Lines;  // the same read-back steps on every rank
  double last_finite_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t last_finite_step = 0;
  for (int64_t epoch = train_loader.epoch(); epoch < cfg.epochs; ++epoch) {
    if (epoch != train_loader.epoch()) train_loader.set_epoch(epoch);
    EpochProgress progress(epoch + 1, cfg.epochs, train_loader.batches_left(),
                           popt);  // counts from 1
    // Note [Loss read-back]: the step losses stay on the device and are read back together every
    // --log-every steps (one sync), at the end of the epoch, and whenever the progress display
    // is about to print a line, so that line shows the current loss and rate. With N processes
    // the window is summed over ranks first (every rank decides to read back at the same steps:
    // the same counts and the same progress style), so every rank sees the same mean loss and a
    // non-finite loss on any rank stops every rank at the same step.
    std::vector<Tensor> window;
    bool stopped = false;
    int stop_sig = 0;  // agreed by every rank (Note [Preemption])
    while (true) {
      if (prof) prof->mark(StepProfiler::StepBegin);
      std::optional<data::Batch> batch = train_loader.next();
      if (!batch) break;
      data::Batch& b = *batch;
      if (prof) prof->mark(StepProfiler::DataReady);
      Tensor loss = runner.step(b.data, b.target);
      if (prof) prof->end_step();
      ++step;
      window.push_back(cfg.cuda_graph ? loss.clone() : loss);  // a replayed graph rewrites its loss
      bool last = train_loader.batches_left() == 0 || (cfg.max_steps > 0 && step >= cfg.max_steps);
      if (int64_t(window.size()) == cfg.log_every || last ||
          progress.line_due(progress.steps_done() + int64_t(window.size()))) {
        Tensor host;
        {
          NoGradGuard g;
          Tensor w = stack(window).to(kF64);
          if (world > 1) {  // the sum over all ranks, and the stop flags (Note [Preemption])
            w = cat({w, full({1}, double(stop_signal.requested()), {.dtype = kF64, .device = dev})},
                    0);
            pg->all_reduce(w, dist::ReduceOp::Sum)->wait();
          }
          host = w.to(kCPU);  // one device sync per window
        }
        std::vector<double> v = host.to_vector<double>();
        if (world > 1) {
          if (v.back() > 0) stop_sig = stop_signal.requested() ? stop_signal.requested() : SIGTERM;
          v.pop_back();
        }
        for (double& x : v) x /= double(world);  // the mean over ranks
        int64_t first = step - int64_t(window.size()) + 1;
        double sum = 0;
        for (size_t i = 0; i < window.size(); ++i) {
          int64_t s_i = first + int64_t(i);
          LOOM_CHECK(std::isfinite(v[i]) || cfg.allow_nonfinite,
                     "training diverged: the loss at step ", s_i, " is ", v[i],
                     " (last finite loss ",
                     last_finite_step > 0 ? str(last_finite_loss, " at step ", last_finite_step)
                                          : std::string("none"),
                     "); lower --lr, or pass --allow-nonfinite to go on");
          if (std::isfinite(v[i])) {
            last_finite_loss = v[i];
            last_finite_step = s_i;
          }
          sum += v[i];
        }
        double mean = sum / double(window.size());
        for (size_t i = 0; i < window.size(); ++i) progress.step(v[i], b.data.size(0) * world);
        tb_write([&](SummaryWriter& w) { w.add_scalar("train/loss", mean, step); });
        window.clear();
      }
      if (world == 1) stop_sig = stop_signal.requested();
      if (stop_sig) break;
      if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 &&
          train_loader.batches_left() > 0)
        save(epoch, train_loader.state().position * world);
      if (cfg.max_steps > 0 && step >= cfg.max_steps) {
        stopped = true;
        break;
      }
    }
    progress.finish();
    if (stop_sig) {  // the sampler position may be the epoch's end: resuming evaluates, then saves
      report_stop(stop_sig, str("step ", step), save(epoch, train_loader.state().position * world));
      break;
    }
    // Training throughput of this epoch, measured before the evaluation starts.
    const double train_seconds = progress.seconds(),
                 samples_per_second = progress.samples_per_second(),
                 ms_per_step = progress.ms_per_step();
    if (stopped) {
      if (main) std::printf("stopped after %ld steps (--max-steps)\n", long(step));
      break;
    }
    if (ddp) ddp->sync_buffers();  // evaluate every rank with rank 0's BatchNorm statistics
    double eval_start = steady_seconds();
    // Plain variables, not a structured binding: the lambda below captures them, which clang
    // before 16 refuses for bindings (the sanitizer builds use Debian's clang 14).
    const std::pair<double, double> evaluated = evaluate(*model, test_loader, *pg, dev);
    const double test_loss = evaluated.first, test_acc = evaluated.second;
    double eval_seconds = steady_seconds() - eval_start;
    EpochSummary s{epoch + 1,          cfg.epochs,  progress.mean_loss(), test_loss,   test_acc,
                   samples_per_second, ms_per_step, train_seconds,        eval_seconds};
    if (main) {
      std::printf("%s\n", format_epoch_summary(s).c_str());
      if (scaler.is_enabled())  // reads the scale back: once per epoch
        std::printf("  amp fp16: loss scale %g, %ld optimizer steps skipped so far\n",
                    scaler.get_scale(), long(scaler.skipped_steps()));
      std::fflush(stdout);
    }
    tb_write([&](SummaryWriter& w) {  // tb exists on rank 0 only
      w.add_scalar("test/loss", test_loss, step);
      w.add_scalar("test/accuracy", test_acc, step);
      w.add_scalar("train/epoch_loss", progress.mean_loss(), step);
      w.add_scalar("train/lr", opt->lr(), step);
      if (scaler.is_enabled()) {
        w.add_scalar("train/loss_scale", scaler.get_scale(), step);
        w.add_scalar("train/skipped_steps", double(scaler.skipped_steps()), step);
      }
      w.add_scalar("train/samples_per_second", samples_per_second, step);
      w.flush();
    });
    std::string epoch_checkpoint = save(epoch + 1, 0);
    rep.train_loss = progress.mean_loss();
    rep.test_loss = test_loss;
    rep.test_accuracy = test_acc;
    rep.evaluated = true;
    if (epoch + 1 < cfg.epochs) {  // a signal during the evaluation: that checkpoint is the last
      if (int sig = stop_everywhere(stop_signal.requested())) {
        report_stop(sig, str("epoch ", epoch + 1, " (step ", step, ")"), epoch_checkpoint);
        break;
      }
    }
  }
  if (prof) std::printf("profile %s\n", prof->summary(rank).c_str());
  rep.seconds = steady_seconds() - t_start;
  rep.steps = step;
  return rep;
}

int exit_status(const TrainReport& r) { return r.stop_signal ? 128 + r.stop_signal : 0; }

void print_final(const TrainReport& r) {
  if (r.rank != 0 || r.stop_signal) return;  // one line per job, from rank 0; stop_now printed
  if (r.evaluated)
    std::printf("final test accuracy %.2f%% after %ld steps in %.1f s\n", 100.0 * r.test_accuracy,
                long(r.steps), r.seconds);
  else
    std::printf(
        "no evaluation ran (stopped by --max-steps before an epoch ended): %ld steps in %.1f s\n",
        long(r.steps), r.seconds);
}

}  // namespace loom::examples
