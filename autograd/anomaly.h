// Anomaly mode, as torch.autograd.detect_anomaly / set_detect_anomaly: while it is on, every op
// recorded in the autograd graph checks its output for NaN and Inf, and the backward pass checks
// every gradient a node returns; the first non-finite value is an Error naming the op, the pass
// (forward or backward) and where the op's forward was recorded (the scope path: the modules
// being called, Module::operator(), and any AnomalyScope labels). Off by default: then the cost
// is one relaxed atomic load per recorded op and per backward node.
// Leaves out: ops that are not recorded (grad mode off, or no input requires grad; their NaN is
// reported by the first recorded op that reads it, as "an input already held ...").
#pragma once

#include <string>

#include "core/tensor.h"

namespace loom::autograd {

// Process-wide, like PyTorch's: every thread's ops and backward passes see the same switch.
bool is_anomaly_enabled();
void set_detect_anomaly(bool on);

// Turns anomaly mode on (or off) for its lifetime, then restores the previous setting.
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool on = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// Names a region of the forward for anomaly reports ("encoder", "attention block 3"): pushed on
// this thread's scope path while anomaly mode is on (nothing happens when it is off).
// Module::operator() opens one per module call.
class AnomalyScope {
 public:
  explicit AnomalyScope(const std::string& label);
  ~AnomalyScope();
  AnomalyScope(const AnomalyScope&) = delete;
  AnomalyScope& operator=(const AnomalyScope&) = delete;

 private:
  bool pushed_ = false;
};

// This thread's scope path, outermost first: "Sequential > 3 (Linear)"; "" when there is none.
std::string anomaly_scope_path();

// How many of t's values are NaN and how many are +-Inf (0, 0 for non-floating dtypes). Reads
// the tensor back to the host (a device sync): anomaly mode only.
struct NonFiniteCount {
  int64_t nan = 0, inf = 0;
  bool any() const { return nan + inf > 0; }
};
NonFiniteCount count_nonfinite(const Tensor& t);

}  // namespace loom::autograd

namespace loom {
using autograd::DetectAnomalyGuard;
using autograd::set_detect_anomaly;
}  // namespace loom
