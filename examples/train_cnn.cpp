// train_cnn: trains the cnn workload (three Conv-BatchNorm-ReLU blocks, max pooling, global
// average pooling, a linear classifier) on Fashion-MNIST with random-crop and flip augmentation.
//
//   ./build/examples/train_cnn                          # 10 epochs, Adam lr 1e-3, batch 128
//   ./build/examples/train_cnn --device cuda:1 --cuda-graph --log-dir runs/cnn
#include "autograd/ops/ops.h"
#include "data/mnist.h"
#include "examples/common/trainer.h"
#include "nn/models.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN on Fashion-MNIST with loom"};
  examples::TrainConfig cfg;
  bool augment = true;
  examples::add_train_flags(app, cfg);
  app.add_option("--augment", augment, "random crop (padding 2) and horizontal flip of training images");
  CLI11_PARSE(app, argc, argv);

  return examples::run_main("train_cnn", [&] {
    manual_seed(cfg.seed);
    auto model = nn::make_cnn();
    std::shared_ptr<const data::Transform> aug;
    if (augment) {
      // Images arrive normalised, so the padding is filled with the normalised value of black.
      auto norm = data::kFashionMnistNormalization;
      float black = -norm.mean / norm.std;
      aug = std::make_shared<data::Compose>(std::vector<std::shared_ptr<const data::Transform>>{
          std::make_shared<data::RandomCrop>(28, 2, black), std::make_shared<data::RandomHorizontalFlip>(0.5)});
    }
    auto report = examples::train_classifier(model, cfg, aug);
    std::printf("final test accuracy %.2f%% after %ld steps in %.1f s\n", 100.0 * report.test_accuracy,
                long(report.steps), report.seconds);
    return 0;
  });
}
