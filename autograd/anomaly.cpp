// Anomaly mode: the switch, the scope path and the NaN/Inf count. See autograd/anomaly.h; the
// checks themselves are in record() (autograd/function.cpp) and the engine (autograd/engine.cpp).
#include "autograd/anomaly.h"

#include <atomic>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"

namespace loom::autograd {

namespace {
std::atomic<bool> g_anomaly{false};
thread_local std::vector<std::string> t_scopes;
}  // namespace

bool is_anomaly_enabled() { return g_anomaly.load(std::memory_order_relaxed); }
void set_detect_anomaly(bool on) { g_anomaly.store(on, std::memory_order_relaxed); }

DetectAnomalyGuard::DetectAnomalyGuard(bool on) : prev_(is_anomaly_enabled()) {
  set_detect_anomaly(on);
}
DetectAnomalyGuard::~DetectAnomalyGuard() { set_detect_anomaly(prev_); }

AnomalyScope::AnomalyScope(const std::string& label) {
  if (!is_anomaly_enabled()) return;
  t_scopes.push_back(label);
  pushed_ = true;
}
AnomalyScope::~AnomalyScope() {
  if (pushed_) t_scopes.pop_back();
}

std::string anomaly_scope_path() {
  std::string out;
  for (const std::string& s : t_scopes) out += (out.empty() ? "" : " > ") + s;
  return out;
}

NonFiniteCount count_nonfinite(const Tensor& t) {
  NonFiniteCount c;
  if (!t.defined() || !is_floating(t.dtype()) || t.numel() == 0) return c;
  NoGradGuard no_grad;
  const double n = double(t.numel());
  // x * 0 is 0 for a finite x and NaN for NaN or Inf; x == x is false only for NaN.
  double finite = eq(mul(t, 0.0), 0.0).to(kF64).sum().item();
  double not_nan = eq(t, t).to(kF64).sum().item();
  c.nan = int64_t(n - not_nan);
  c.inf = int64_t(n - finite) - c.nan;
  return c;
}

}  // namespace loom::autograd
