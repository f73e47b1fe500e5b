// train_cnn: trains a CNN on Fashion-MNIST: two blocks of [Conv-BatchNorm-ReLU x 2, MaxPool],
// then dropout and a two-layer classifier. --model workload trains the benchmark's cnn instead
// (three conv blocks and global average pooling; docs/workloads.md). --augment adds
// random-crop and flip augmentation.
//
//   ./build/examples/train_cnn                          # 10 epochs, Adam lr 1e-3, batch 128
//   ./build/examples/train_cnn --device cuda:1 --cuda-graph --log-dir runs/cnn
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_cnn   # one
//   process per GPU (or CPU process)
#include <cstdio>

#include "autograd/ops/ops.h"
#include "data/mnist.h"
#include "distributed/env.h"
#include "examples/common/trainer.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "train/flags.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN on Fashion-MNIST with loom"};
  examples::TrainConfig cfg;
  bool augment = false;
  std::string arch = "classifier";
  examples::add_train_flags(app, cfg);
  app.add_option("--augment", augment,
                 "random crop (padding 2) and horizontal flip of training images");
  app.add_option("--model", arch, "classifier (default) or workload (the benchmark's cnn)")
      ->check(CLI::IsMember({"classifier", "workload"}));
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return examples::run_main("train_cnn", [&] {
    manual_seed(cfg.seed);
    std::shared_ptr<nn::Module> model = arch == "workload"
                                            ? std::shared_ptr<nn::Module>(nn::make_cnn())
                                            : std::shared_ptr<nn::Module>(make_classifier());
    const auto fused = nn::fuse(*model);  // BatchNorm2d + ReLU (+ MaxPool2d(2)) as one op
    if (dist::job_env().rank == 0) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    std::shared_ptr<const data::Transform> aug;
    if (augment) {
      // Images arrive normalised, so the padding is filled with the normalised value of black.
      auto norm = data::kFashionMnistNormalization;
      float black = -norm.mean / norm.std;
      aug = std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
          std::make_shared<data::RandomCrop>(28, 2, black),
          std::make_shared<data::RandomHorizontalFlip>(0.5)});
    }
    auto report = examples::train_classifier(model, cfg, aug);
    examples::print_final(report);
    return examples::exit_status(report);  // 0, or 143/130 after a SIGTERM/SIGINT stop
  });
}
