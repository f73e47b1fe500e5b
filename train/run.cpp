// The run's bookkeeping around the program's step: see train/run.h.
#include "train/run.h"

#include <algorithm>
#include <cstdio>

namespace loom::train {

int64_t total_steps(const TrainConfig& cfg, const data::DataLoader& loader) {
  return cfg.max_steps > 0 ? cfg.max_steps : cfg.epochs * loader.size();
}

Run::Run(TrainConfig& cfg, const RunSetup& setup, RunParts parts, RunPlan plan)
    : cfg_(cfg),
      setup_(setup),
      parts_(parts),
      plan_(std::move(plan)),
      ckpt_(cfg, setup, {parts.model, parts.scaler, parts.loader, parts.scheduler}),
      log_(cfg, setup),
      window_(cfg, setup) {
  const int64_t per_epoch = std::max<int64_t>(1, parts_.loader.size());
  total_ = total_steps(cfg, parts_.loader);
  if (plan_.samples_per_step == 0) plan_.samples_per_step = cfg.batch_size;  // a classifier's
  if (plan_.eval_every > 0)  // --max-steps rules: as many epochs as its steps cross
    cfg_.epochs = std::max(cfg_.epochs, (total_ + per_epoch - 1) / per_epoch);
  step_ = ckpt_.resume();  // 0, or where the newest checkpoint stopped
  if (!plan_.accuracy_name.empty()) log_.set_accuracy_name(plan_.accuracy_name);
  log_.start(plan_.title, plan_.train_examples, plan_.unit);
  if (setup.world > 1 && setup.main())  // "DDP over 2 processes", "tensor parallel over 2 ..."
    std::printf("parallel: %s\n", parts_.model.describe().c_str());
  if (cfg.detect_anomaly) anomaly_.emplace(true);
  if (cfg.profile) {
    profiler_ = std::make_unique<StepProfiler>(setup.device);
    parts_.model.on_backward_computed(  // when backward's compute ends: the exposed reduction
        [p = profiler_.get()] { p->mark(StepProfiler::BackwardComputed); });
  }
  memory_.emplace(setup.device);  // each rank's bytes, printed after the first step
}

Accumulation Run::accumulation() const {
  return {.k = cfg_.grad_accum, .model = &parts_.model, .profiler = profiler_.get()};
}

ProgressOptions Run::progress_options() const {
  ProgressOptions o = setup_.progress_options();
  if (plan_.counts_tokens()) o.rate_unit = "tok/s";
  return o;
}

bool Run::next_interval() {
  if (window_.stop_signal()) return false;
  if (plan_.eval_every == 0) {  // an epoch; the loader moves on when its batches end
    epoch_ = parts_.loader.epoch();
    if (epoch_ >= cfg_.epochs) return false;
    progress_.emplace(epoch_ + 1, cfg_.epochs, parts_.loader.batches_left(), progress_options());
    return true;
  }
  if (step_ >= total_) return false;
  in_interval_ = 0;
  interval_steps_ = std::min(plan_.eval_every, total_ - step_);
  const int64_t n = plan_.eval_every;
  progress_.emplace(step_ / n + 1, (total_ + n - 1) / n, interval_steps_, progress_options());
  return true;
}

// The loader's next batch, with the --profile marks around the wait for it.
std::optional<data::Batch> Run::next_batch() {
  if (plan_.eval_every > 0 && in_interval_ == interval_steps_) return std::nullopt;
  StepProfiler* p = profiler_.get();
  if (p) p->mark(StepProfiler::StepBegin);
  std::optional<data::Batch> batch = parts_.loader.next();
  if (!batch && plan_.eval_every > 0) batch = parts_.loader.next();  // the next epoch's first
  if (batch && p) p->mark(StepProfiler::DataReady);
  return batch;
}

bool Run::interval_done() const {
  if (plan_.eval_every > 0) return in_interval_ == interval_steps_;
  return parts_.loader.batches_left() == 0 || cfg_.max_steps_reached(step_);
}

bool Run::after_step(const Tensor& loss) {
  if (profiler_) {
    profiler_->mark(StepProfiler::OptimizerEnd);
    profiler_->end_step();
  }
  if (memory_) {  // a collective: every rank reports after its first step
    memory_->report(setup_, parts_.model);
    memory_.reset();
  }
  ++step_;
  ++in_interval_;
  if (auto mean = window_.add(loss, step_, interval_done(), *progress_, plan_.samples_per_step))
    log_.scalar("train/loss", *mean, step_);
  if (window_.stop_signal()) return false;
  if (ckpt_.due(step_)) ckpt_.save_here(step_);  // --checkpoint-every, mid-interval
  return !cfg_.max_steps_reached(step_);
}

bool Run::end_interval() {
  progress_->finish();
  if (int sig = window_.stop_signal()) {  // save exactly this step, then exit 128 + sig
    log_.stopped(sig, str("step ", step_), ckpt_.save_here(step_));
    return false;
  }
  if (plan_.eval_every == 0 && cfg_.max_steps_reached(step_)) {
    log_.stopped_at_max_steps(step_);
    return false;
  }
  return true;
}

bool Run::evaluated(const Evaluation& eval) {
  last_eval_ = eval;
  if (plan_.eval_every > 0) {
    report_validation(eval);
    ckpt_.save_here(step_);
    return true;
  }
  const int64_t epoch = epoch_;
  log_.end_epoch(epoch, *progress_, eval, parts_.model.optimizer().lr(), parts_.scaler, step_);
  std::string saved = ckpt_.save(epoch + 1, 0, step_);
  int sig = epoch + 1 < cfg_.epochs ? window_.stop_everywhere() : 0;  // a signal during eval?
  if (sig) log_.stopped(sig, str("epoch ", epoch + 1, " (step ", step_, ")"), saved);
  return sig == 0;
}

// A language model's line after each validation: losses, rate, MFU, learning rate.
void Run::report_validation(const Evaluation& val) {
  const EpochProgress& p = *progress_;
  const double rate = p.samples_per_second();
  const double flops_per_sample = plan_.flops_per_step / double(plan_.samples_per_step);
  const bool tokens = plan_.counts_tokens();
  if (setup_.main())
    std::printf(
        "step %ld | train loss %.4f | val loss %.4f | %.0f %s | %.2f ms/step | "
        "MFU %.1f%% | lr %.3g\n",
        long(step_), p.mean_loss(), val.loss, rate, tokens ? "tok/s" : "examples/s",
        p.ms_per_step(), 100.0 * rate * flops_per_sample / (plan_.peak_tflops * 1e12),
        parts_.model.optimizer().lr());
  if (setup_.main() && !plan_.accuracy_name.empty())
    std::printf("  val %s %.4f\n", plan_.accuracy_name.c_str(), val.accuracy);
  log_.validated(val);
  log_.scalar("val/loss", val.loss, step_);
  if (!plan_.accuracy_name.empty()) log_.scalar("val/accuracy", val.accuracy, step_);
  log_.scalar(tokens ? "train/tokens_per_second" : "train/samples_per_second", rate, step_);
}

int Run::finish() { return log_.finish(step_, profiler_.get()); }

}  // namespace loom::train
