// The shared training loop of the example programs. See trainer.h.
#include "examples/common/trainer.h"

#include <cstdio>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "nn/checkpoint.h"
#include "nn/optim/adam.h"
#include "nn/optim/sgd.h"
#include "train/progress.h"
#include "train/step_runner.h"
#include "train/tensorboard.h"

namespace loom::examples {

using namespace loom::train;

void add_train_flags(CLI::App& app, TrainConfig& c) {
  app.add_option("--device", c.device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(CLI::PositiveNumber);
  app.add_option("--batch-size", c.batch_size, "examples per step")->check(CLI::PositiveNumber);
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

Device pick_device(const std::string& spec) {
  if (!spec.empty()) return Device(spec);
  if (cuda::is_available()) return cuda_device(0);
  return kCPU;
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

  model->to(dev);
  model->train();
  auto opt = make_optimizer(cfg, model->parameters());

  // Resume: model, optimizer, RNG and the position in the epoch.
  int64_t step = 0;
  if (cfg.resume) {
    if (auto st = load_latest_checkpoint(cfg.checkpoint_dir)) {
      model->load_state_dict(st->model);
      model->to(dev);
      opt->load_state_dict(st->optimizer);
      restore_default_rng(*st);
      step = st->extra_int("step");
      train_loader.load_state({st->extra_int("epoch"), st->extra_int("position")});
      std::printf("resumed from %s (epoch %ld, step %ld)\n", st->source.c_str(), long(st->extra_int("epoch") + 1),
                  long(step));
    } else {
      std::printf("no checkpoint in %s: starting from scratch\n", cfg.checkpoint_dir.c_str());
    }
  }
  std::unique_ptr<SummaryWriter> tb;
  if (!cfg.log_dir.empty()) tb = std::make_unique<SummaryWriter>(cfg.log_dir);
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
  for (int64_t epoch = train_loader.epoch(); epoch < cfg.epochs; ++epoch) {
    if (epoch != train_loader.epoch()) train_loader.set_epoch(epoch);
    EpochProgress progress(epoch + 1, cfg.epochs, train_loader.batches_left());  // counts from 1
    Tensor window_loss;
    int64_t window = 0;
    bool stopped = false;
    for (auto& b : train_loader) {
      Tensor loss = runner.step(b.data, b.target);
      ++step;
      {
        NoGradGuard g;
        window_loss = window_loss.defined() ? window_loss + loss : loss.clone();
      }
      ++window;
      if (window == cfg.log_every || train_loader.batches_left() == 0) {
        double l = window_loss.item() / double(window);  // one device sync per window
        for (int64_t i = 0; i < window; ++i) progress.step(l, b.data.size(0));
        if (tb) tb->add_scalar("train/loss", l, step);
        window_loss = Tensor();
        window = 0;
      }
      if (cfg.max_steps > 0 && step >= cfg.max_steps) {
        stopped = true;
        break;
      }
    }
    progress.finish();
    if (stopped) {
      std::printf("stopped after %ld steps (--max-steps)\n", long(step));
      break;
    }
    auto [test_loss, test_acc] = evaluate(*model, test_loader);
    EpochSummary s{epoch + 1, cfg.epochs, progress.mean_loss(), test_loss, test_acc,
                   progress.samples_per_second(), progress.ms_per_step(), progress.seconds()};
    std::printf("%s\n", format_epoch_summary(s).c_str());
    if (tb) {
      tb->add_scalar("test/loss", test_loss, step);
      tb->add_scalar("test/accuracy", test_acc, step);
      tb->add_scalar("train/epoch_loss", progress.mean_loss(), step);
      tb->add_scalar("train/lr", opt->lr(), step);
      tb->add_scalar("train/samples_per_second", progress.samples_per_second(), step);
      tb->flush();
    }
    save(epoch + 1, 0);
    rep = {progress.mean_loss(), test_loss, test_acc, 0, step};
  }
  rep.seconds = steady_seconds() - t_start;
  rep.steps = step;
  return rep;
}

}  // namespace loom::examples
