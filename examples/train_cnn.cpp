// train_cnn: trains an image classifier on Fashion-MNIST. By default a small CNN: two blocks of
// [Conv-BatchNorm-ReLU x 2, MaxPool], then dropout and a two-layer classifier. --model picks
// another: workload (the benchmark's cnn: three conv blocks and global average pooling;
// docs/workloads.md), resnet18 (ResNet-18 with the small-image stem, nn/resnet.h) or vit (a
// 6-layer, 128-wide Vision Transformer on 4x4 patches, nn/vit.h). --augment adds random-crop and
// flip augmentation; --lr-schedule cosine a per-step cosine decay after --warmup steps; --sync-bn
// BatchNorm statistics over every process (distributed/sync_batch_norm.h).
//
//   ./build/examples/train_cnn                          # 10 epochs, Adam lr 1e-3, batch 128
//   ./build/examples/train_cnn --model resnet18 --augment true --optimizer sgd --lr 0.1
//       --weight-decay 5e-4 --lr-schedule cosine --epochs 15 --amp bf16   # (one line; README)
//   ./build/examples/train_cnn --device cuda:1 --cuda-graph --log-dir runs/cnn
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_cnn   # one
//   process per GPU (or CPU process)
//
// The training loop is in main below, as in examples/train_mlp.cpp (which says more about it);
// the CNN adds BatchNorm buffers (synced over ranks before each evaluation) and augmentation.
#include <cstdio>

#include "autograd/anomaly.h"
#include "autograd/ops/ops.h"
#include "data/mnist.h"
#include "distributed/ddp/ddp.h"
#include "distributed/sync_batch_norm.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "nn/optim/lr_scheduler.h"
#include "train/checkpointing.h"
#include "train/classifier_data.h"
#include "train/data_parallel.h"
#include "train/loss_window.h"
#include "train/make_optimizer.h"
#include "train/run_log.h"
#include "train/train_flags.h"

using namespace loom;

namespace {

// [Conv2d(in, out, 3, padding 1), BatchNorm2d, ReLU]; shapes keep H and W.
void conv_bn_relu(nn::Sequential& s, int64_t in, int64_t out) {
  s.push_back(nn::make<nn::Conv2d>(in, out, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
  s.push_back(nn::make<nn::BatchNorm2d>(out));
  s.push_back(nn::make<nn::ReLU>());
}

// (N, 1, 28, 28) -> (N, 32, 14, 14) -> (N, 64, 7, 7) -> 3136 features -> 256 -> 10 classes.
std::shared_ptr<nn::Sequential> make_classifier() {
  auto s = nn::make<nn::Sequential>();
  conv_bn_relu(*s, 1, 32);
  conv_bn_relu(*s, 32, 32);
  s->push_back(nn::make<nn::MaxPool2d>(2));
  conv_bn_relu(*s, 32, 64);
  conv_bn_relu(*s, 64, 64);
  s->push_back(nn::make<nn::MaxPool2d>(2));
  s->push_back(nn::make<nn::Flatten>());
  s->push_back(nn::make<nn::Dropout>(0.25));
  s->push_back(nn::make<nn::Linear>(64 * 7 * 7, 256));
  s->push_back(nn::make<nn::ReLU>());
  s->push_back(nn::make<nn::Dropout>(0.25));
  s->push_back(nn::make<nn::Linear>(256, 10));
  return s;
}

// Random crop and flip. Images arrive normalised, so the padding is the normalised value of black.
std::shared_ptr<const data::Transform> augmentation() {
  auto norm = data::kFashionMnistNormalization;
  float black = -norm.mean / norm.std;
  return std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
      std::make_shared<data::RandomCrop>(28, 2, black),
      std::make_shared<data::RandomHorizontalFlip>(0.5)});
}

// The model --model names: (N, 1, 28, 28) -> (N, 10) logits.
std::shared_ptr<nn::Module> make_model(const std::string& arch) {
  if (arch == "workload") return nn::make_cnn();
  if (arch == "resnet18")
    return nn::make_resnet18({.num_classes = 10, .in_channels = 1, .small_stem = true});
  if (arch == "vit") return nn::make_vit_fashion_mnist(4);
  return make_classifier();
}

// The optimizer: --optimizer over every parameter, except that the ViT under adamw decays only
// its matrices (biases and LayerNorms in a group without weight decay, as transformers train).
std::unique_ptr<optim::Optimizer> make_model_optimizer(const train::TrainConfig& cfg,
                                                       const std::string& arch, nn::Module& model) {
  if (arch == "vit" && cfg.optimizer == "adamw")
    return train::make_transformer_adamw(cfg, model.parameters(), 0.999);
  return train::make_optimizer(cfg, model.parameters());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN on Fashion-MNIST with loom"};
  train::TrainConfig cfg;
  bool augment = false;
  std::string arch = "classifier";
  train::add_train_flags(app, cfg);
  app.add_option("--augment", augment,
                 "random crop (padding 2) and horizontal flip of training images");
  app.add_option("--model", arch,
                 "classifier (default), workload (the benchmark's cnn), resnet18 (small-image "
                 "stem) or vit (patch 4, 6 layers, width 128)")
      ->check(CLI::IsMember({"classifier", "workload", "resnet18", "vit"}));
  bool sync_bn = false;
  app.add_option("--sync-bn", sync_bn,
                 "BatchNorm statistics over every process's batch (SyncBatchNorm), so that N "
                 "processes train as one with the same global batch");
  std::string schedule = "constant";
  int64_t warmup = 0;
  app.add_option("--lr-schedule", schedule,
                 "constant, or cosine: the lr decays to 0 over the run's steps, per step")
      ->check(CLI::IsMember({"constant", "cosine"}));
  app.add_option("--warmup", warmup, "with --lr-schedule cosine: linear warm-up steps first")
      ->check(train::int_range(0, 1 << 30));
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return train::run_main("train_cnn", [&] {
    manual_seed(cfg.seed);
    std::shared_ptr<nn::Module> model = make_model(arch);
    train::RunSetup run(cfg);  // device, process group (under loomrun), checks, seed
    if (sync_bn && distributed::convert_sync_batchnorm(*model, run.pg) > 0 && run.main())
      std::printf("SyncBatchNorm: BatchNorm statistics over the %d processes\n", run.pg->size());
    train::ClassifierData data(cfg, run, augment ? augmentation() : nullptr);  // sharded by rank
    data::DataLoader& loader = *data.train;
    const auto fused =
        nn::fuse(*model);  // BatchNorm2d + ReLU (+ MaxPool2d(2)) run as one op (nn/fuse.h)
    if (run.main()) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    model->to(run.device);
    model->train();
    auto opt = make_model_optimizer(cfg, arch, *model);
    std::optional<DType> amp_dtype;  // docs/amp.md: autocast, and loss scaling for float16
    if (cfg.amp != "off") amp_dtype = cfg.amp == "bf16" ? DType::BF16 : DType::F16;
    amp::GradScaler scaler(amp::GradScalerOptions{.enabled = cfg.amp == "fp16"});
    // The replica: rank 0's weights everywhere, gradients averaged over ranks (docs/ddp.md);
    // with --zero the optimizer state (and gradients) sharded over them (docs/sharding.md).
    train::DataParallel dp(cfg, run, model, *opt);
    distributed::DistributedDataParallel* ddp = dp.ddp();
    nn::Module& net = dp.net();
    // --lr-schedule cosine: one scheduler step per optimizer step, over --max-steps or the epochs.
    const int64_t total = cfg.max_steps > 0 ? cfg.max_steps : cfg.epochs * loader.size();
    std::optional<optim::CosineWithWarmup> sched;
    if (schedule == "cosine")
      sched.emplace(dp.optimizer(),
                    optim::CosineWithWarmupOptions{.warmup_steps = std::min(warmup, total - 1),
                                                   .total_steps = total});
    train::Checkpointer ckpt(
        cfg, run, {*model, dp.optimizer(), scaler, loader, sched ? &*sched : nullptr, dp.fsdp()});
    int64_t step = ckpt.resume();  // 0, or where the newest checkpoint stopped
    train::RunLog log(cfg, run);
    log.start(model->type_name(), data.train_set->size());
    std::optional<autograd::DetectAnomalyGuard> anomaly;
    if (cfg.detect_anomaly) anomaly.emplace(true);
    train::LossWindow window(cfg, run);  // read-backs, divergence, SIGTERM (Note [Preemption])
    train::StepRunner runner(net, dp.optimizer(), cfg.label_smoothing, cfg.cuda_graph);
    train::MemoryProbe memory(run.device);  // each rank's bytes, printed after the first step
    bool memory_reported = false;
    runner.set_grad_accum(cfg.grad_accum);  // --grad-accum: micro-batches, one update
    runner.set_amp(amp_dtype, scaler.is_enabled() ? &scaler : nullptr);
    auto prof = train::attach_profiler(cfg, run, runner, ddp);

    // The loop. The loader counts epochs: it moves to the next one when an epoch's batches end.
    for (int64_t epoch = loader.epoch(); epoch < cfg.epochs; epoch = loader.epoch()) {
      train::EpochProgress progress(epoch + 1, cfg.epochs, loader.batches_left(),
                                    run.progress_options());
      while (auto batch = train::next_batch(loader, prof.get())) {
        Tensor loss = runner.step(batch->data, batch->target);  // a scalar, left on the device
        if (!memory_reported) {
          memory.report(run, *model, dp);
          memory_reported = true;
        }
        if (prof) prof->end_step();
        if (sched) sched->step();
        ++step;
        bool last = loader.batches_left() == 0 || cfg.max_steps_reached(step);
        if (auto mean = window.add(loss, step, last, progress, cfg.batch_size))
          log.scalar("train/loss", *mean, step);
        if (window.stop_signal()) break;
        if (ckpt.due(step)) ckpt.save_here(step);  // --checkpoint-every, mid-epoch
        if (cfg.max_steps_reached(step)) break;
      }
      progress.finish();
      if (int sig = window.stop_signal()) {  // save exactly this step, then exit 128 + sig
        log.stopped(sig, str("step ", step), ckpt.save_here(step));
        break;
      }
      if (cfg.max_steps_reached(step)) {
        log.stopped_at_max_steps(step);
        break;
      }
      dp.sync_buffers();  // evaluate every rank with rank 0's buffers (DDP, FSDP)
      auto eval = train::evaluate_classifier(dp.eval_net(), *data.test, *run.pg, run.device);
      log.end_epoch(epoch, progress, eval, dp.optimizer().lr(), scaler, step);
      std::string saved = ckpt.save(epoch + 1, 0, step);
      int sig = epoch + 1 < cfg.epochs ? window.stop_everywhere() : 0;  // a signal during eval?
      if (sig) {  // then the epoch's checkpoint is the last
        log.stopped(sig, str("epoch ", epoch + 1, " (step ", step, ")"), saved);
        break;
      }
    }
    return log.finish(step, prof.get());  // 0, or 143/130 after a SIGTERM/SIGINT stop
  });
}
