// The shared training loop of the example programs. See trainer.h.
#include "examples/common/trainer.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "nn/checkpoint.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "train/flags.h"
#include "train/progress.h"
#include "train/step_runner.h"
#include "train/tensorboard.h"

namespace loom::examples {

namespace fs = std::filesystem;
using namespace loom::train;

void add_train_flags(CLI::App& app, TrainConfig& c) {
  configure_app(app);  // before any option: --help shows the defaults
  app.add_option("--device", c.device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(int_range(1, 1000000));
  app.add_option("--batch-size", c.batch_size, "examples per step")->check(int_range(1, 1 << 24));
  app.add_option("--lr", c.lr, "learning rate")->check(real_range(0, 1e3, true));
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(real_range(0, 1e3));
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing")->check(real_range(0, 0.99));
  app.add_option("--seed", c.seed, "seed of initialisation, shuffling and augmentation");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST idx files");
  app.add_option("--workers", c.workers, "data-loading worker threads (at most 4 per hardware thread)")
      ->check(int_range(0, max_workers()));
  app.add_option("--log-dir", c.log_dir, "write TensorBoard event files here");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--keep-last", c.keep_last, "checkpoints to keep")->check(int_range(1, 1000000));
  app.add_flag("--resume", c.resume, "continue from the newest valid checkpoint in --checkpoint-dir (which must exist)");
  app.add_flag("--cuda-graph", c.cuda_graph, "capture the whole training step as a CUDA graph and replay it");
  app.add_option("--train-limit", c.train_limit, "train on the first N images only (0: all)")
      ->check(int_range(0, int64_t(1) << 40));
  app.add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")
      ->check(int_range(0, int64_t(1) << 50));
  app.add_option("--log-every", c.log_every, "read the loss back every N steps")->check(int_range(1, 1000000));
  app.add_flag("--allow-nonfinite", c.allow_nonfinite, "keep training when the loss is nan or inf (default: stop)");
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

Device pick_device(const std::string& spec) {
  if (spec.empty()) return cuda::is_available() ? cuda_device(0) : kCPU;
  Device d(spec);
  if (d.is_cuda()) {
    LOOM_CHECK(cuda::compiled_with_cuda(), "--device ", spec, ": this build of loom has no CUDA support");
    int n = cuda::device_count();
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
void check_resume_state(const TrainingState& st, const nn::StateDict& model_sd, int64_t steps_per_epoch,
                        int64_t epoch_size, const TrainConfig& cfg) {
  const std::string where = "checkpoint '" + st.source + "'";
  int64_t epoch = st.extra_int("epoch"), step = st.extra_int("step"), position = st.extra_int("position");
  LOOM_CHECK(epoch >= 0 && step >= 0 && position >= 0, where, ": negative counters (epoch ", epoch, ", step ", step,
             ", position ", position, ")");
  LOOM_CHECK(epoch <= cfg.epochs, where, ": epoch ", epoch, " is beyond this run's --epochs ", cfg.epochs);
  LOOM_CHECK(epoch < cfg.epochs, where, ": the run is complete (", epoch, " of --epochs ", cfg.epochs,
             " epochs done): nothing to train; raise --epochs to train further");
  LOOM_CHECK(cfg.max_steps == 0 || step < cfg.max_steps, where, ": step ", step, " is not below --max-steps ",
             cfg.max_steps, ": nothing to train");
  LOOM_CHECK(position <= epoch_size, where, ": sampler position ", position, " is beyond the epoch of ", epoch_size,
             " examples (saved with another dataset or --train-limit?)");
  LOOM_CHECK(step <= (epoch + 1) * steps_per_epoch, where, ": step ", step, " is beyond what epoch ", epoch + 1,
             " can reach (", steps_per_epoch, " steps per epoch; saved with another --batch-size?)");
  std::map<std::string, DType> want;
  for (const auto& [name, t] : model_sd) want[name] = t.dtype();
  for (const auto& [name, t] : st.model) {
    auto it = want.find(name);
    LOOM_CHECK(it == want.end() || it->second == t.dtype(), where, ": model tensor '", name, "' is ",
               dtype_name(t.dtype()), " but the model's is ", dtype_name(it->second));
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<Tensor> params) {
  if (c.optimizer == "sgd")
    return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = c.lr, .momentum = 0.9, .weight_decay = c.weight_decay});
  if (c.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = c.lr, .weight_decay = c.weight_decay});
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = c.lr, .weight_decay = c.weight_decay});
}

// Test loss and accuracy, accumulated on the device and read back once.
std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum, correct;
  int64_t n = 0;
  for (auto& b : loader) {
    Tensor logits = model(b.data);
    Tensor l = cross_entropy(logits, b.target, Reduction::Sum);
    Tensor c = eq(argmax(logits, 1), b.target).to(kF64).sum();
    loss_sum = loss_sum.defined() ? loss_sum + l.to(kF64) : l.to(kF64);
    correct = correct.defined() ? correct + c : c;
    n += b.data.size(0);
  }
  model.train();
  return {loss_sum.item() / double(n), correct.item() / double(n)};
}

}  // namespace

TrainReport train_classifier(const std::shared_ptr<nn::Module>& model, const TrainConfig& cfg,
                             std::shared_ptr<const data::Transform> train_transform) {
  double t_start = steady_seconds();
  Device dev = pick_device(cfg.device);
  LOOM_CHECK(!cfg.resume || !cfg.checkpoint_dir.empty(), "--resume needs --checkpoint-dir");
  LOOM_CHECK(!cfg.cuda_graph || dev.is_cuda(), "--cuda-graph needs a CUDA device, got --device ", dev);
  // A typo in the folder must not silently retrain from scratch.
  LOOM_CHECK(!cfg.resume || fs::is_directory(cfg.checkpoint_dir), "--resume: the checkpoint folder '",
             cfg.checkpoint_dir, "' does not exist (leave out --resume to start a new run)");
  if (!cfg.checkpoint_dir.empty()) check_writable_dir("--checkpoint-dir", cfg.checkpoint_dir);
  if (!cfg.log_dir.empty()) check_writable_dir("--log-dir", cfg.log_dir);
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
  data::DataLoader train_loader(train_data, {.batch_size = cfg.batch_size, .shuffle = true, .drop_last = true,
                                             .num_workers = cfg.workers, .device = dev, .seed = cfg.seed,
                                             .transform = train_transform});
  data::DataLoader test_loader(test_set, {.batch_size = 1000, .num_workers = cfg.workers, .device = dev});
  const int64_t steps_per_epoch = train_loader.size();
  LOOM_CHECK(steps_per_epoch > 0, "no training step: ", train_data->size(), " training examples make no full batch of ",
             "--batch-size ", cfg.batch_size, " (the last partial batch is dropped); lower --batch-size",
             cfg.train_limit > 0 ? " or raise --train-limit" : "");
  LOOM_CHECK(test_set->size() > 0, "no test examples in ", cfg.data_dir);

  model->to(dev);
  model->train();
  auto opt = make_optimizer(cfg, model->parameters());

  // Resume: model, optimizer, RNG and the position in the epoch.
  int64_t step = 0;
  if (cfg.resume) {
    if (auto st = load_latest_checkpoint(cfg.checkpoint_dir)) {
      check_resume_state(*st, model->state_dict(), steps_per_epoch, train_data->size(), cfg);
      model->load_state_dict(st->model);
      model->to(dev);
      opt->load_state_dict(st->optimizer);
      restore_default_rng(*st);
      step = st->extra_int("step");
      train_loader.load_state({st->extra_int("epoch"), st->extra_int("position")});
      std::printf("resumed from %s (epoch %ld, step %ld)\n", st->source.c_str(), long(st->extra_int("epoch") + 1),
                  long(step));
    } else if (list_checkpoints(cfg.checkpoint_dir).empty()) {
      std::printf("no checkpoint in %s yet: starting a new run\n", cfg.checkpoint_dir.c_str());
    } else {
      LOOM_FAIL("--resume: no checkpoint in '", cfg.checkpoint_dir,
                "' is valid (each was skipped above, with the reason); move them away to start a new run");
    }
  }
  std::unique_ptr<SummaryWriter> tb;
  if (!cfg.log_dir.empty()) tb = std::make_unique<SummaryWriter>(cfg.log_dir);
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
  std::printf("training %s on %s: %ld examples, batch %ld, %s lr %g\n", model->type_name().c_str(),
              dev.str().c_str(), long(train_data->size()), long(cfg.batch_size), cfg.optimizer.c_str(), cfg.lr);

  auto save = [&](int64_t epoch, int64_t position) {
    if (cfg.checkpoint_dir.empty()) return;
    TrainingState st;
    st.model = model->state_dict();
    st.optimizer = opt->state_dict();
    st.set_extra("epoch", epoch);
    st.set_extra("position", position);
    st.set_extra("step", step);
    st.rng["default"] = default_generator().state();
    save_checkpoint(cfg.checkpoint_dir, step, st, cfg.keep_last);
  };

  StepRunner runner(*model, *opt, cfg.label_smoothing, cfg.cuda_graph);
  TrainReport rep;
  double last_finite_loss = std::numeric_limits<double>::quiet_NaN();
  int64_t last_finite_step = 0;
  for (int64_t epoch = train_loader.epoch(); epoch < cfg.epochs; ++epoch) {
    if (epoch != train_loader.epoch()) train_loader.set_epoch(epoch);
    EpochProgress progress(epoch + 1, cfg.epochs, train_loader.batches_left());  // counts from 1
    // Note [Loss read-back]: the step losses stay on the device and are read back together every
    // --log-every steps (one sync), at the end of the epoch, and whenever the progress display
    // is about to print a line, so that line shows the current loss and rate.
    std::vector<Tensor> window;
    bool stopped = false;
    for (auto& b : train_loader) {
      Tensor loss = runner.step(b.data, b.target);
      ++step;
      window.push_back(cfg.cuda_graph ? loss.clone() : loss);  // a replayed graph rewrites its loss
      bool last = train_loader.batches_left() == 0 || (cfg.max_steps > 0 && step >= cfg.max_steps);
      if (int64_t(window.size()) == cfg.log_every || last ||
          progress.line_due(progress.steps_done() + int64_t(window.size()))) {
        Tensor host;
        {
          NoGradGuard g;
          host = stack(window).to(kF64).to(kCPU);  // one device sync per window
        }
        const double* v = host.data<double>();
        int64_t first = step - int64_t(window.size()) + 1;
        double sum = 0;
        for (size_t i = 0; i < window.size(); ++i) {
          int64_t s_i = first + int64_t(i);
          LOOM_CHECK(std::isfinite(v[i]) || cfg.allow_nonfinite, "training diverged: the loss at step ", s_i, " is ",
                     v[i], " (last finite loss ",
                     last_finite_step > 0 ? str(last_finite_loss, " at step ", last_finite_step) : std::string("none"),
                     "); lower --lr, or pass --allow-nonfinite to go on");
          if (std::isfinite(v[i])) {
            last_finite_loss = v[i];
            last_finite_step = s_i;
          }
          sum += v[i];
        }
        double mean = sum / double(window.size());
        for (size_t i = 0; i < window.size(); ++i) progress.step(v[i], b.data.size(0));
        tb_write([&](SummaryWriter& w) { w.add_scalar("train/loss", mean, step); });
        window.clear();
      }
      if (cfg.max_steps > 0 && step >= cfg.max_steps) {
        stopped = true;
        break;
      }
    }
    progress.finish();
    // Training throughput of this epoch, measured before the evaluation starts.
    const double train_seconds = progress.seconds(), samples_per_second = progress.samples_per_second(),
                 ms_per_step = progress.ms_per_step();
    if (stopped) {
      std::printf("stopped after %ld steps (--max-steps)\n", long(step));
      break;
    }
    double eval_start = steady_seconds();
    auto [test_loss, test_acc] = evaluate(*model, test_loader);
    double eval_seconds = steady_seconds() - eval_start;
    EpochSummary s{epoch + 1,          cfg.epochs,  progress.mean_loss(), test_loss,    test_acc,
                   samples_per_second, ms_per_step, train_seconds,        eval_seconds};
    std::printf("%s\n", format_epoch_summary(s).c_str());
    std::fflush(stdout);
    tb_write([&](SummaryWriter& w) {
      w.add_scalar("test/loss", test_loss, step);
      w.add_scalar("test/accuracy", test_acc, step);
      w.add_scalar("train/epoch_loss", progress.mean_loss(), step);
      w.add_scalar("train/lr", opt->lr(), step);
      w.add_scalar("train/samples_per_second", samples_per_second, step);
      w.flush();
    });
    save(epoch + 1, 0);
    rep.train_loss = progress.mean_loss();
    rep.test_loss = test_loss;
    rep.test_accuracy = test_acc;
    rep.evaluated = true;
  }
  rep.seconds = steady_seconds() - t_start;
  rep.steps = step;
  return rep;
}

void print_final(const TrainReport& r) {
  if (r.evaluated)
    std::printf("final test accuracy %.2f%% after %ld steps in %.1f s\n", 100.0 * r.test_accuracy, long(r.steps),
                r.seconds);
  else
    std::printf("no evaluation ran (stopped by --max-steps before an epoch ended): %ld steps in %.1f s\n",
                long(r.steps), r.seconds);
}

}  // namespace loom::examples
