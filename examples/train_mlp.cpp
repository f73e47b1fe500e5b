// train_mlp: trains the mlp workload (784 -> 1024 -> 1024 -> 10, ReLU) on Fashion-MNIST, on the
// GPU if there is one, else on the CPU, with progress, per-epoch test accuracy, optional
// TensorBoard logs and checkpoints with exact resume.
//
//   ./build/examples/train_mlp                          # 10 epochs, Adam lr 1e-3, batch 128
//   ./build/examples/train_mlp --device cpu --epochs 1
//   ./build/examples/train_mlp --checkpoint-dir ckpt --log-dir runs/mlp   # then: --resume
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_mlp   # one
//   process per GPU (or CPU process)
//
// The training loop is examples::train_classifier (examples/common/trainer.cpp): for each batch
// it calls train::StepRunner::step (train/step_runner.cpp), which is zero_grad, forward,
// cross_entropy, backward and the optimizer's step, then logs the loss; after each epoch it tests
// and saves a checkpoint. docs/tour.md follows one such step through the library.
#include <cstdio>

#include "autograd/ops/ops.h"
#include "distributed/env.h"
#include "examples/common/trainer.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "train/flags.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP on Fashion-MNIST with loom"};
  examples::TrainConfig cfg;
  int64_t hidden = 1024;
  examples::add_train_flags(app, cfg);
  app.add_option("--hidden", hidden, "width of the two hidden layers")
      ->check(train::int_range(1, 65536));
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return examples::run_main("train_mlp", [&] {
    manual_seed(cfg.seed);  // the same seed gives the same initial weights on every device
    auto model = nn::make_mlp(hidden);
    const auto fused = nn::fuse(*model);  // each Linear + ReLU runs as one op (nn/fuse.h)
    if (dist::job_env().rank == 0) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    auto report = examples::train_classifier(model, cfg);
    examples::print_final(report);
    return examples::exit_status(report);  // 0, or 143/130 after a SIGTERM/SIGINT stop
  });
}
