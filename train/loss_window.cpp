// The loss read-back window and the agreed stop. See loss_window.h.
#include "train/loss_window.h"

#include <signal.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "core/error.h"

namespace loom::train {

namespace dist = loom::distributed;

LossWindow::LossWindow(const TrainConfig& cfg, const RunSetup& run) : cfg_(cfg), run_(run) {}

std::optional<double> LossWindow::add(const Tensor& loss, int64_t step, bool last,
                                      EpochProgress& progress, int64_t samples) {
  window_.push_back(cfg_.cuda_graph ? loss.clone() : loss);  // a replayed graph rewrites its loss
  const int64_t n = int64_t(window_.size());
  std::optional<double> mean;
  if (n == cfg_.log_every || last || progress.line_due(progress.steps_done() + n)) {
    std::vector<double> v = read_back();
    check_finite(v, step - n + 1);
    double sum = 0;
    for (double x : v) sum += x;
    for (double x : v) progress.step(x, samples);
    mean = sum / double(n);
    window_.clear();
  }
  if (run_.world == 1) stop_ = signal_.requested();
  return mean;
}

// The window's losses (n), averaged over ranks; with N processes also agrees on the stop flag.
std::vector<double> LossWindow::read_back() {
  const int world = run_.world;
  Tensor host;
  {
    NoGradGuard g;
    Tensor w = stack(window_).to(kF64);  // (n)
    if (world > 1) {  // the sum over all ranks, and the stop flags (Note [Preemption]): (n + 1)
      w = cat({w, full({1}, double(signal_.requested()), {.dtype = kF64, .device = run_.device})},
              0);
      run_.pg->all_reduce(w, dist::ReduceOp::Sum)->wait();
    }
    host = w.to(kCPU);  // one device sync per window
  }
  std::vector<double> v = host.to_vector<double>();
  if (world > 1) {
    if (v.back() > 0) stop_ = signal_.requested() ? signal_.requested() : SIGTERM;
    v.pop_back();
  }
  for (double& x : v) x /= double(world);  // the mean over ranks
  return v;
}

void LossWindow::check_finite(const std::vector<double>& v, int64_t first_step) {
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t s_i = first_step + int64_t(i);
    LOOM_CHECK(std::isfinite(v[i]) || cfg_.allow_nonfinite, "training diverged: the loss at step ",
               s_i, " is ", v[i], " (last finite loss ",
               last_finite_step_ > 0 ? str(last_finite_loss_, " at step ", last_finite_step_)
                                     : std::string("none"),
               "); lower --lr, or pass --allow-nonfinite to go on");
    if (std::isfinite(v[i])) {
      last_finite_loss_ = v[i];
      last_finite_step_ = s_i;
    }
  }
}

int LossWindow::stop_everywhere() {
  int local = signal_.requested();
  if (run_.world == 1) return local;
  Tensor f = full({1}, double(local), {.dtype = kF64, .device = run_.device});
  run_.pg->all_reduce(f, dist::ReduceOp::Max)->wait();
  return int(f.to(kCPU).item());
}

}  // namespace loom::train
