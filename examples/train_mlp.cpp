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
// The training loop is in main below, top to bottom: epochs -> batches -> one step each
// (train::StepRunner::step in train/step_runner.cpp: zero_grad, forward, cross_entropy, backward,
// the optimizer's step) -> the loss window -> at the end of an epoch: evaluate, summary,
// TensorBoard, save. The parts it calls live in train/ (run_setup, classifier_data,
// checkpointing, loss_window, evaluate, run_log). docs/tour.md follows one step through the
// library, on one process and under loomrun with DDP.
#include <cstdio>

#include "autograd/anomaly.h"
#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/models.h"
#include "train/checkpointing.h"
#include "train/classifier_data.h"
#include "train/data_parallel.h"
#include "train/loss_window.h"
#include "train/make_optimizer.h"
#include "train/run_log.h"
#include "train/train_flags.h"

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
    train::RunSetup run(cfg);              // device, process group (under loomrun), checks, seed
    train::ClassifierData data(cfg, run);  // images (N, 1, 28, 28), labels (N); sharded by rank
    data::DataLoader& loader = *data.train;
    const auto fused = nn::fuse(*model);  // each Linear + ReLU runs as one op (nn/fuse.h)
    if (run.main()) std::printf("%s\n", nn::fusion_summary(fused).c_str());
    model->to(run.device);
    model->train();
    auto opt = train::make_optimizer(cfg, model->parameters());
    std::optional<DType> amp_dtype;  // docs/amp.md: autocast, and loss scaling for float16
    if (cfg.amp != "off") amp_dtype = cfg.amp == "bf16" ? DType::BF16 : DType::F16;
    amp::GradScaler scaler(amp::GradScalerOptions{.enabled = cfg.amp == "fp16"});
    // The replica: rank 0's weights everywhere, gradients averaged over ranks (docs/ddp.md);
    // with --zero the optimizer state (and gradients) sharded over them (docs/sharding.md).
    train::DataParallel dp(cfg, run, model, *opt);
    distributed::DistributedDataParallel* ddp = dp.ddp();
    nn::Module& net = dp.net();
    train::Checkpointer ckpt(cfg, run,
                             {*model, dp.optimizer(), scaler, loader, nullptr, dp.fsdp()});
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
      log.end_epoch(epoch, progress, eval, opt->lr(), scaler, step);
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
