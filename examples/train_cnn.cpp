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
// The training step and loop are in main below, as in examples/train_mlp.cpp (which says more
// about them); the CNN adds BatchNorm buffers (synced over ranks before each evaluation),
// augmentation and a learning-rate schedule.
#include <cstdio>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "data/mnist.h"
#include "distributed/parallel/parallelize.h"
#include "distributed/sync_batch_norm.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "nn/optim/lr_scheduler.h"
#include "train/classifier_data.h"
#include "train/cuda_graph_step.h"
#include "train/flags.h"
#include "train/make_optimizer.h"
#include "train/run.h"

using namespace loom;

namespace {

// The program's own flags, beside train::TrainConfig's.
struct CnnFlags {
  std::string arch = "classifier";
  bool augment = false, sync_bn = false;
  std::string schedule = "constant";
  int64_t warmup = 0;
};

void add_cnn_flags(CLI::App& app, CnnFlags& f) {
  app.add_option("--augment", f.augment,
                 "random crop (padding 2) and horizontal flip of training images");
  app.add_option("--model", f.arch,
                 "classifier (default), workload (the benchmark's cnn), resnet18 (small-image "
                 "stem) or vit (patch 4, 6 layers, width 128)")
      ->check(CLI::IsMember({"classifier", "workload", "resnet18", "vit"}));
  app.add_option("--sync-bn", f.sync_bn,
                 "BatchNorm statistics over every process's batch (SyncBatchNorm), so that N "
                 "processes train as one with the same global batch");
  app.add_option("--lr-schedule", f.schedule,
                 "constant, or cosine: the lr decays to 0 over the run's steps, per step")
      ->check(CLI::IsMember({"constant", "cosine"}));
  app.add_option("--warmup", f.warmup, "with --lr-schedule cosine: linear warm-up steps first")
      ->check(train::int_range(0, 1 << 30));
}

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
  CnnFlags f;
  train::add_train_flags(app, cfg);
  add_cnn_flags(app, f);
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return train::run_main("train_cnn", [&] {
    manual_seed(cfg.seed);
    std::shared_ptr<nn::Module> model = make_model(f.arch);
    train::RunSetup setup(cfg);  // device, process group (under loomrun), checks, seed
    if (f.sync_bn && distributed::convert_sync_batchnorm(*model, setup.pg) > 0 && setup.main())
      std::printf("SyncBatchNorm: BatchNorm statistics over the %d processes\n", setup.pg->size());
    train::ClassifierData data(cfg, setup, f.augment ? augmentation() : nullptr);  // by rank
    const auto fused = nn::fuse(*model);  // BatchNorm2d + ReLU (+ MaxPool2d(2)) as one op
    if (setup.main()) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    train::convert_for_amp(*model, cfg, setup.main());  // --amp fp8: FP8 Linears (docs/fp8.md)
    model->to(setup.device);
    model->train();
    // DDP, or ZeRO with --zero (docs/ddp.md), with the arch's optimizer.
    auto parallel = distributed::parallelize(
        model, train::parallel_plan(cfg), setup.pg,
        [&](nn::Module& m) { return make_model_optimizer(cfg, f.arch, m); });
    nn::Module& net = parallel->train_module();
    optim::Optimizer& opt = parallel->optimizer();
    // --lr-schedule cosine: one scheduler step per optimizer step, over --max-steps or the epochs.
    const int64_t total = train::total_steps(cfg, *data.train);
    std::optional<optim::CosineWithWarmup> sched;
    if (f.schedule == "cosine")
      sched.emplace(opt, optim::CosineWithWarmupOptions{
                             .warmup_steps = std::min(f.warmup, total - 1), .total_steps = total});
    std::optional<DType> amp_dtype = train::autocast_dtype(cfg);  // docs/amp.md
    amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});       // loss scaling for float16
    train::Run run(cfg, setup, {*parallel, *data.train, scaler, sched ? &*sched : nullptr},
                   {.title = model->type_name(), .train_examples = data.train_set->size()});

    // One training step, as in examples/train_mlp.cpp.
    auto forward_backward = [&](const train::MicroBatch& mb) {  // x (b, 1, 28, 28), y (b)
      amp::Autocast autocast(amp_dtype);  // --amp: convolutions and matmuls in bf16 or fp16
      Tensor loss = mb.share(cross_entropy(net(mb.x), mb.y, Reduction::Mean, cfg.label_smoothing));
      mb.forward_done();
      scaler.scale(loss).backward();
      return loss.detach();
    };
    train::CudaGraphStep step(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = train::accumulate(x, y, run.accumulation(), forward_backward);
          scaler.step(opt);  // opt.step(), skipped under fp16 when a gradient is inf or nan
          scaler.update();
          return loss;
        },
        cfg.cuda_graph, opt, parallel.get(), cfg.grad_accum);

    while (run.next_interval()) {  // an epoch
      while (auto batch = run.next_batch()) {
        Tensor loss = step(batch->data, batch->target);
        if (sched) sched->step();
        if (!run.after_step(loss)) break;
      }
      if (!run.end_interval()) break;
      parallel->sync_buffers();  // evaluate every rank with rank 0's BatchNorm statistics
      if (!run.evaluated(train::evaluate_classifier(*parallel, *data.test, setup))) break;
    }
    return run.finish();
  });
}
