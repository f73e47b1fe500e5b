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
// main below shows the training step (zero_grad, forward, loss, backward, the optimizer's step) and
// the loop: epochs -> batches -> one step each -> at the end of an epoch, evaluate. train::Run
// (train/run.h) keeps the books around it: the loss window, TensorBoard, checkpoints, signals,
// --max-steps. docs/tour.md follows one step through the library, on one process and under
// loomrun with DDP.
#include <cstdio>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "distributed/parallel/parallelize.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "train/classifier_data.h"
#include "train/cuda_graph_step.h"
#include "train/flags.h"
#include "train/make_optimizer.h"
#include "train/run.h"

using namespace loom;

int main(int argc, char** argv) {
  CLI::App app{"Train an MLP on Fashion-MNIST with loom"};
  train::TrainConfig cfg;
  int64_t hidden = 1024;
  train::add_train_flags(app, cfg);
  app.add_option("--hidden", hidden, "width of the two hidden layers")
      ->check(train::int_range(1, 65536));
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return train::run_main("train_mlp", [&] {
    manual_seed(cfg.seed);  // the same seed gives the same initial weights on every device
    std::shared_ptr<nn::Module> model = nn::make_mlp(hidden);
    train::RunSetup setup(cfg);              // device, process group (under loomrun), checks, seed
    train::ClassifierData data(cfg, setup);  // images (N, 1, 28, 28), labels (N); sharded by rank
    const auto fused = nn::fuse(*model);     // each Linear + ReLU runs as one op (nn/fuse.h)
    if (setup.main()) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    train::convert_for_amp(*model, cfg, setup.main());  // --amp fp8: FP8 Linears (docs/fp8.md)
    model->to(setup.device);
    model->train();
    // The replicas: rank 0's weights everywhere, gradients averaged over ranks (docs/ddp.md);
    // with --zero the optimizer state (and gradients) sharded over them (docs/sharding.md).
    auto parallel = distributed::parallelize(model, train::parallel_plan(cfg), setup.pg,
                                             [&](nn::Module& m) {  // Adam over its parameters
                                               return train::make_optimizer(cfg, m.parameters());
                                             });
    nn::Module& net = parallel->train_module();  // the model, or its DDP wrapper
    optim::Optimizer& opt = parallel->optimizer();
    std::optional<DType> amp_dtype = train::autocast_dtype(cfg);  // docs/amp.md
    amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});       // loss scaling for float16
    train::Run run(cfg, setup, {*parallel, *data.train, scaler},
                   {.title = model->type_name(), .train_examples = data.train_set->size()});

    // One training step, as a PyTorch program writes it. --grad-accum runs forward_backward on
    // each micro-batch (train::accumulate), --cuda-graph replays the whole step (CudaGraphStep).
    auto forward_backward = [&](const train::MicroBatch& mb) {  // x (b, 1, 28, 28), y (b)
      amp::Autocast autocast(amp_dtype);  // --amp: the matrix products in bf16 or fp16
      Tensor loss = mb.share(cross_entropy(net(mb.x), mb.y, Reduction::Mean, cfg.label_smoothing));
      mb.forward_done();
      scaler.scale(loss).backward();  // (without autocast); DDP all-reduces as gradients come
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
      while (auto batch = run.next_batch())
        if (!run.after_step(step(batch->data, batch->target))) break;  // log, save, stop?
      if (!run.end_interval()) break;
      parallel->sync_buffers();  // evaluate every rank with rank 0's buffers (DDP, FSDP)
      if (!run.evaluated(train::evaluate_classifier(*parallel, *data.test, setup))) break;
    }
    return run.finish();  // 0, or 143/130 after a SIGTERM/SIGINT stop
  });
}
