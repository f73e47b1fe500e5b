// What a training run prints and logs. See run_log.h.
#include "train/run_log.h"

#include <cstdio>

#include "train/stop_signal.h"

namespace loom::train {

int exit_status(const TrainReport& r) { return r.stop_signal ? 128 + r.stop_signal : 0; }

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

RunLog::RunLog(const TrainConfig& cfg, const RunSetup& run) : cfg_(cfg), run_(run) {
  if (run.main() && !cfg.log_dir.empty()) tb_ = std::make_unique<SummaryWriter>(cfg.log_dir);
}

void RunLog::start(const std::string& model_name, int64_t train_examples, const char* unit) {
  if (!run_.main()) return;
  const int world = run_.world;
  std::printf(
      "training %s on %s%s: %ld %s, batch %ld%s%s, %s lr %g%s\n", model_name.c_str(),
      run_.device.str().c_str(),
      world > 1
          ? (" x " + std::to_string(world) + " processes (" + run_.pg->backend() + ")").c_str()
          : "",
      long(train_examples), unit, long(cfg_.batch_size),
      world > 1 ? (" (" + std::to_string(run_.local_batch) +
                   (cfg_.tp * cfg_.pp == 1 ? " per process)" : " per data-parallel replica)"))
                      .c_str()
                : "",
      cfg_.grad_accum > 1
          ? (" as " + std::to_string(cfg_.grad_accum) + " accumulated micro-batches").c_str()
          : "",
      cfg_.optimizer.c_str(), cfg_.lr, cfg_.amp != "off" ? (", amp " + cfg_.amp).c_str() : "");
  std::fflush(stdout);  // these lines survive a kill (the output may be a file)
}

// Note [Log write failures]
// TensorBoard logs are a convenience; a write that fails later (a full disk) is reported once and
// logging stops, while training goes on. Checkpoints are not: a failed save is an error (and the
// previous checkpoint stays, core/atomic_file.h).
void RunLog::scalar(const std::string& tag, double value, int64_t step) {
  if (!tb_) return;  // tb_ exists on rank 0 only
  try {
    tb_->add_scalar(tag, value, step);
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: TensorBoard logging stops, training goes on: %s\n", e.what());
    tb_.reset();
  }
}

void RunLog::end_epoch(int64_t epoch, const EpochProgress& progress, const Evaluation& eval,
                       double lr, const amp::GradScaler& scaler, int64_t step) {
  EpochSummary s{epoch + 1,
                 cfg_.epochs,
                 progress.mean_loss(),
                 eval.loss,
                 eval.accuracy,
                 progress.samples_per_second(),
                 progress.ms_per_step(),
                 progress.seconds(),
                 eval.seconds};
  if (run_.main()) {
    std::printf("%s\n", format_epoch_summary(s).c_str());
    if (scaler.is_enabled())  // reads the scale back: once per epoch
      std::printf("  amp fp16: loss scale %g, %ld optimizer steps skipped so far\n",
                  scaler.get_scale(), long(scaler.skipped_steps()));
    std::fflush(stdout);
  }
  scalar("test/loss", eval.loss, step);
  scalar("test/accuracy", eval.accuracy, step);
  scalar("train/epoch_loss", progress.mean_loss(), step);
  scalar("train/lr", lr, step);
  if (scaler.is_enabled()) {
    scalar("train/loss_scale", scaler.get_scale(), step);
    scalar("train/skipped_steps", double(scaler.skipped_steps()), step);
  }
  scalar("train/samples_per_second", s.samples_per_second, step);
  if (tb_) {
    try {
      tb_->flush();
    } catch (const Error& e) {
      std::fprintf(stderr, "warning: TensorBoard logging stops, training goes on: %s\n", e.what());
      tb_.reset();
    }
  }
  report_.train_loss = progress.mean_loss();
  report_.test_loss = eval.loss;
  report_.test_accuracy = eval.accuracy;
  report_.evaluated = true;
}

void RunLog::stopped(int sig, const std::string& when, const std::string& checkpoint) {
  report_.stop_signal = sig;
  report_.stop_checkpoint = checkpoint;
  if (!run_.main()) return;
  if (checkpoint.empty())
    std::printf("got %s: stopped after %s; nothing saved (no --checkpoint-dir)\n",
                stop_signal_name(sig), when.c_str());
  else
    std::printf("got %s: stopped after %s and saved %s; run again with --resume to continue\n",
                stop_signal_name(sig), when.c_str(), checkpoint.c_str());
  std::fflush(stdout);
}

void RunLog::stopped_at_max_steps(int64_t step) {
  if (run_.main()) std::printf("stopped after %ld steps (--max-steps)\n", long(step));
}

void RunLog::validated(const Evaluation& eval) {
  report_.test_loss = eval.loss;
  report_.test_accuracy = eval.accuracy;
  report_.evaluated = report_.validation = true;
}

int RunLog::finish(int64_t steps, const StepProfiler* profiler) {
  if (profiler) std::printf("profile %s\n", profiler->summary(run_.rank).c_str());
  report_.seconds = steady_seconds() - run_.start_seconds;
  report_.steps = steps;
  const TrainReport& r = report_;
  if (run_.main() && !r.stop_signal) {  // one line per job; stopped() printed its own
    if (r.validation)
      std::printf("final validation loss %.4f (%s %.2f%%) after %ld steps in %.1f s\n", r.test_loss,
                  accuracy_name_.c_str(), 100.0 * r.test_accuracy, long(r.steps), r.seconds);
    else if (r.evaluated)
      std::printf("final test accuracy %.2f%% after %ld steps in %.1f s\n", 100.0 * r.test_accuracy,
                  long(r.steps), r.seconds);
    else
      std::printf(
          "no evaluation ran (stopped by --max-steps before an epoch ended): %ld steps in %.1f s\n",
          long(r.steps), r.seconds);
  }
  return exit_status(r);
}

}  // namespace loom::train
