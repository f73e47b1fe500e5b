// StepProfiler (train/step_profile.h): CUDA events on a GPU, the wall clock otherwise.
#include "train/step_profile.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

namespace loom::train {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

struct StepProfiler::Impl {
#ifdef LOOM_WITH_CUDA
  std::array<std::unique_ptr<cuda::Event>, kMarks> events;
#endif
};

StepProfiler::StepProfiler(Device device) : impl_(std::make_unique<Impl>()), device_(device) {
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::DeviceGuard g(device_.index);
    for (auto& e : impl_->events) e = std::make_unique<cuda::Event>(true);
  }
#endif
}

StepProfiler::~StepProfiler() = default;

void StepProfiler::mark(Mark m) {
  marked_[size_t(m)] = true;
  host_[size_t(m)] = now_s();
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    cuda::DeviceGuard g(device_.index);
    impl_->events[size_t(m)]->record(cuda::current_stream(device_.index));
  }
#endif
}

void StepProfiler::end_step() {
  for (int m = 0; m < kMarks; ++m)
    LOOM_CHECK(marked_[size_t(m)], "StepProfiler: mark ", m, " was not recorded in this step");
  std::array<double, kMarks> t{};  // ms since StepBegin (host) / DataReady (device)
  bool on_device = false;
#ifdef LOOM_WITH_CUDA
  if (device_.is_cuda()) {
    on_device = true;
    impl_->events[OptimizerEnd]->synchronize();
    for (int m = DataReady; m < kMarks; ++m)
      t[size_t(m)] = double(impl_->events[DataReady]->elapsed_ms(*impl_->events[size_t(m)]));
  }
#endif
  if (!on_device)
    for (int m = DataReady; m < kMarks; ++m)
      t[size_t(m)] = (host_[size_t(m)] - host_[DataReady]) * 1e3;
  totals_.data += (host_[DataReady] - host_[StepBegin]) * 1e3;
  totals_.forward += t[ForwardEnd] - t[DataReady];
  totals_.backward += t[BackwardComputed] - t[ForwardEnd];
  totals_.allreduce_exposed += t[BackwardEnd] - t[BackwardComputed];
  totals_.optimizer += t[OptimizerEnd] - t[BackwardEnd];
  ++totals_.steps;
  marked_.fill(false);
}

std::string StepProfiler::summary(int rank) const {
  const Phases& p = totals_;
  double n = p.steps > 0 ? double(p.steps) : 1.0;
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "rank %d: %ld steps, ms/step %.3f = data %.3f + forward %.3f + backward %.3f + "
                "all-reduce exposed %.3f + optimizer %.3f (%s)",
                rank, long(p.steps), p.total() / n, p.data / n, p.forward / n, p.backward / n,
                p.allreduce_exposed / n, p.optimizer / n,
                device_.is_cuda() ? "CUDA events" : "wall clock");
  return buf;
}

}  // namespace loom::train
