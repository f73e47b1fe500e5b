// The shared training loop of the example programs. See trainer.h.
#include "examples/common/trainer.h"

#include <cstdio>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "distributed/ddp.h"
#include "distributed/env.h"
#include "nn/checkpoint.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "train/progress.h"
#include "train/step_profile.h"
#include "train/step_runner.h"
#include "train/tensorboard.h"

namespace loom::examples {

using namespace loom::train;

void add_train_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--device", c.device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch_size, "examples per step over all processes (each of N processes takes 1/N)")->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr, "learning rate")->check(CLI::PositiveNumber);
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(CLI::NonNegativeNumber);
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing")->check(CLI::Range(0.0, 0.99));
  app.add_option("--seed", c.seed, "seed of initialisation, shuffling and augmentation");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST idx files");
  app.add_option("--workers", c.workers, "data-loading worker threads")->check(CLI::NonNegativeNumber);
  app.add_option("--log-dir", c.log_dir, "write TensorBoard event files here");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--keep-last", c.keep_last, "checkpoints to keep")->check(CLI::PositiveNumber);
  app.add_flag("--resume", c.resume, "continue from the newest valid checkpoint in --checkpoint-dir");
  app.add_flag("--cuda-graph", c.cuda_graph, "capture the whole training step as a CUDA graph and replay it");
  app.add_option("--train-limit", c.train_limit, "train on the first N images only (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", c.log_every, "read the loss back every N steps")->check(CLI::PositiveNumber);
  app.add_option("--checkpoint-every", c.checkpoint_every, "also save a checkpoint every N steps (0: per epoch only)")->check(CLI::NonNegativeNumber);
  app.add_flag("--profile", c.profile, "print each process's step-time breakdown (data, forward, backward, exposed all-reduce, optimizer)");
}

int run_main(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 1;
  }
}

namespace {

namespace dist = loom::distributed;

// One GPU per process: cuda:LOCAL_RANK under a launcher (when --device is empty or "cuda").
Device pick_device(const std::string& spec, const dist::JobEnv& env) {
  int n = cuda::device_count();
  if ((spec.empty() && cuda::is_available()) || spec == "cuda")
    return cuda_device(env.world_size > 1 && n > 0 ? env.local_rank % n : 0);
  if (!spec.empty()) return Device(spec);
  return kCPU;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = 0.9, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

// Test loss and accuracy over the whole test set: each process evaluates its exactly-once share
// (Note [Sharded evaluation]); the sums are all-reduced and read back once.
std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader, dist::ProcessGroup& pg,
                                   Device dev) {
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum = zeros({1}, {.dtype = kF64, .device = dev}), correct = zeros({1}, {.dtype = kF64, .device = dev});
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
  LOOM_CHECK(!cfg.cuda_graph || dev.is_cuda(), "--cuda-graph needs a CUDA device, got --device ", dev);
  LOOM_CHECK(!cfg.cuda_graph || world == 1, "--cuda-graph with ", world, " processes: the distributed step "
             "runs eagerly (see Note [DDP and CUDA graphs] in docs/ddp.md: the process group's watchdog "
             "cannot track collectives inside a captured graph); drop --cuda-graph");
  LOOM_CHECK(!cfg.profile || !cfg.cuda_graph, "--profile times the phases of the eager step; with "
             "--cuda-graph the step is one replay (drop one of the two flags)");
  LOOM_CHECK(cfg.batch_size % world == 0, "--batch-size ", cfg.batch_size, " is the global batch and must "
             "be divisible by the ", world, " processes");
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
      train_data->size(), data::DistributedSamplerOptions{.num_replicas = world, .rank = rank, .shuffle = true,
                                                          .seed = cfg.seed, .drop_last = true});
  data::DataLoader train_loader(train_data, train_sampler,
                                {.batch_size = local_batch, .drop_last = true, .num_workers = cfg.workers,
                                 .device = dev, .seed = cfg.seed, .transform = train_transform});
  // Note [Sharded evaluation]: no padding, so every test image is counted once over all ranks.
  auto test_sampler = std::make_shared<data::DistributedSampler>(
      test_set->size(), data::DistributedSamplerOptions{.num_replicas = world, .rank = rank, .shuffle = false,
                                                        .exactly_once = true});
  data::DataLoader test_loader(test_set, test_sampler, {.batch_size = 1000, .num_workers = cfg.workers, .device = dev});

  model->to(dev);
  model->train();

  // Resume: model, optimizer, RNG and the global position in the epoch (every rank reads the file).
  int64_t step = 0;
  std::optional<TrainingState> resumed;
  if (cfg.resume) {
    resumed = load_latest_checkpoint(cfg.checkpoint_dir);
    if (resumed) {
      model->load_state_dict(resumed->model);
      restore_default_rng(*resumed);
      step = resumed->extra_int("step");
      if (resumed->extra.count("global_batch"))
        LOOM_CHECK(resumed->extra_int("global_batch") == cfg.batch_size, "--resume: ", resumed->source,
                   " was written with a global batch of ", resumed->extra_int("global_batch"), ", this run has --batch-size ",
                   cfg.batch_size, "; keep the global batch to continue the same run");
      int64_t position = resumed->extra_int("position");  // global samples done in the epoch
      LOOM_CHECK(position % world == 0, "--resume: ", resumed->source, " stopped at sample ", position,
                 " of its epoch, which ", world, " processes cannot split evenly");
      train_loader.load_state({resumed->extra_int("epoch"), position / world});
      if (main)
        std::printf("resumed from %s (epoch %ld, step %ld, written by %ld process(es), now %d)\n",
                    resumed->source.c_str(), long(resumed->extra_int("epoch") + 1), long(step),
                    long(resumed->extra.count("world_size") ? resumed->extra_int("world_size") : 1), world);
    } else if (main) {
      std::printf("no checkpoint in %s: starting from scratch\n", cfg.checkpoint_dir.c_str());
    }
  }
  // The replica: rank 0's weights and buffers everywhere, gradients averaged over ranks.
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (world > 1) ddp = std::make_shared<dist::DistributedDataParallel>(model, pg);
  nn::Module& net = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  auto opt = make_optimizer(cfg, model->parameters());
  if (resumed) opt->load_state_dict(resumed->optimizer);

  std::unique_ptr<SummaryWriter> tb;
  if (main && !cfg.log_dir.empty()) tb = std::make_unique<SummaryWriter>(cfg.log_dir);
  if (main)
    std::printf("training %s on %s%s: %ld examples, batch %ld%s, %s lr %g\n", model->type_name().c_str(),
                dev.str().c_str(), world > 1 ? (" x " + std::to_string(world) + " processes (" + pg->backend() + ")").c_str() : "",
                long(train_data->size()), long(cfg.batch_size),
                world > 1 ? (" (" + std::to_string(local_batch) + " per process)").c_str() : "", cfg.optimizer.c_str(), cfg.lr);

  auto save = [&](int64_t epoch, int64_t global_position) {
    if (cfg.checkpoint_dir.empty()) return;
    if (main) {
      TrainingState st;
      st.model = model->state_dict();
      st.optimizer = opt->state_dict();
      st.set_extra("epoch", epoch);
      st.set_extra("position", global_position);
      st.set_extra("step", step);
      st.set_extra("world_size", world);
      st.set_extra("global_batch", cfg.batch_size);
      st.rng["default"] = default_generator().state();
      save_checkpoint(cfg.checkpoint_dir, step, st, cfg.keep_last);
    }
    if (world > 1) pg->barrier()->wait();  // nobody reads or overwrites it before it is complete
  };

  StepRunner runner(net, *opt, cfg.label_smoothing, cfg.cuda_graph);
  std::unique_ptr<StepProfiler> prof;
  if (cfg.profile) {
    prof = std::make_unique<StepProfiler>(dev);
    runner.set_profiler(prof.get());
    if (ddp) ddp->reducer().set_backward_computed_hook([p = prof.get()] { p->mark(StepProfiler::BackwardComputed); });
  }
  ProgressOptions popt;
  if (!main) popt.out = &null_stream();
  TrainReport rep;
  rep.rank = rank;
  rep.world_size = world;
  for (int64_t epoch = train_loader.epoch(); epoch < cfg.epochs; ++epoch) {
    if (epoch != train_loader.epoch()) train_loader.set_epoch(epoch);
    EpochProgress progress(epoch + 1, cfg.epochs, train_loader.batches_left(), popt);  // counts from 1
    Tensor window_loss;
    int64_t window = 0;
    bool stopped = false;
    while (true) {
      if (prof) prof->mark(StepProfiler::StepBegin);
      std::optional<data::Batch> batch = train_loader.next();
      if (!batch) break;
      data::Batch& b = *batch;
      if (prof) prof->mark(StepProfiler::DataReady);
      Tensor loss = runner.step(b.data, b.target);
      if (prof) prof->end_step();
      ++step;
      {
        NoGradGuard g;
        window_loss = window_loss.defined() ? window_loss + loss : loss.clone();
      }
      ++window;
      if (window == cfg.log_every || train_loader.batches_left() == 0) {
        Tensor wl = window_loss.reshape({1}).contiguous();
        if (world > 1) pg->all_reduce(wl, dist::ReduceOp::Sum)->wait();  // the mean over all ranks
        double l = wl.item() / double(window * world);  // one device sync per window
        for (int64_t i = 0; i < window; ++i) progress.step(l, b.data.size(0) * world);
        if (tb) tb->add_scalar("train/loss", l, step);
        window_loss = Tensor();
        window = 0;
      }
      if (cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0 && train_loader.batches_left() > 0)
        save(epoch, train_loader.state().position * world);
      if (cfg.max_steps > 0 && step >= cfg.max_steps) {
        stopped = true;
        break;
      }
    }
    progress.finish();
    if (stopped) {
      if (main) std::printf("stopped after %ld steps (--max-steps)\n", long(step));
      break;
    }
    if (ddp) ddp->sync_buffers();  // evaluate every rank with rank 0's BatchNorm statistics
    auto [test_loss, test_acc] = evaluate(*model, test_loader, *pg, dev);
    EpochSummary s{epoch + 1, cfg.epochs, progress.mean_loss(), test_loss, test_acc,
                   progress.samples_per_second(), progress.ms_per_step(), progress.seconds()};
    if (main) std::printf("%s\n", format_epoch_summary(s).c_str());
    if (tb) {
      tb->add_scalar("test/loss", test_loss, step);
      tb->add_scalar("test/accuracy", test_acc, step);
      tb->add_scalar("train/epoch_loss", progress.mean_loss(), step);
      tb->add_scalar("train/lr", opt->lr(), step);
      tb->add_scalar("train/samples_per_second", progress.samples_per_second(), step);
      tb->flush();
    }
    save(epoch + 1, 0);
    rep.train_loss = progress.mean_loss();
    rep.test_loss = test_loss;
    rep.test_accuracy = test_acc;
  }
  if (prof) std::printf("profile %s\n", prof->summary(rank).c_str());
  rep.seconds = steady_seconds() - t_start;
  rep.steps = step;
  return rep;
}

}  // namespace loom::examples
