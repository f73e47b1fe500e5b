// GradScaler: dynamic loss scaling for float16 training, as torch.amp.GradScaler. The scale,
// the growth tracker and the inf/NaN flag live in one-element tensors on the loss's device.
// Leaves out: several optimizers per step (one optimizer per scaler step) and sparse gradients.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"

namespace loom::amp {

// Note [GradScaler]
// A step with a scaler is
//   scaler.scale(loss).backward();  // gradients are scale times too large, f16 does not flush
//   scaler.step(opt);                // unscale_ (if not called yet), then opt.step() unless an
//                                    // inf or NaN was found in any gradient
//   scaler.update();                 // found: scale *= backoff; else after growth_interval good
//                                    // steps in a row: scale *= growth
// unscale_ is one fused kernel over every gradient (loom::amp_unscale_) that multiplies by
// 1 / scale and sets found_inf; update is a one-thread kernel (loom::amp_update_scale_). Neither
// reads anything back to the host. step() reads the flag (4 bytes, one sync) to decide whether to
// call opt.step(): a skipped step leaves parameters, optimizer state and step counts unchanged.
// With a capturable optimizer (Note [Capturable optimizer] in nn/optim/optimizer.h) step() reads
// nothing: the optimizer's kernels skip themselves where found_inf is set, and the skipped steps
// are counted on the device too, so forward, backward, unscale, step and update can be captured
// and replayed as one CUDA graph (train/step_runner.cpp, --cuda-graph).
// Under DDP the gradients are already all-reduced when backward returns, so every rank sees
// the same gradients, the same flag and makes the same decision.
// bfloat16 has float32's range and needs no scaler.
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() returns the loss, step() is opt.step(), update() no-op
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale. The scaler's state moves to loss's device at the first call.
  Tensor scale(const Tensor& loss);
  // Divides every gradient of opt's parameters by the scale (one kernel) and records inf/NaN.
  // At most once per step (an error otherwise); step() calls it when the program did not.
  void unscale_(optim::Optimizer& opt);
  // opt.step() unless this step's gradients held an inf or NaN; returns whether it stepped. With
  // a capturable optimizer the decision stays on the device and step() returns true.
  bool step(optim::Optimizer& opt);
  // Moves the scale by the schedule and resets the step's flag. Call once per step, after step().
  void update();

  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  // The current scale (reads the device value: a sync, for log lines and tests).
  double get_scale() const;
  // The good steps since the last growth or backoff (a sync).
  int64_t growth_tracker() const;
  // The number of optimizer steps skipped since construction (or as restored from a checkpoint).
  int64_t skipped_steps() const;  // a sync when the optimizer is capturable
  // This step's inf/NaN flag: float32 (1) on the scaler's device, undefined before scale().
  const Tensor& found_inf() const { return found_inf_; }

  // "scale", "growth_tracker", "growth_factor", "backoff_factor", "growth_interval",
  // "skipped_steps": 0-d float64 entries (what TrainingState::scaler holds).
  nn::StateDict state_dict() const;
  // Restores what state_dict() saved; the Error names every missing entry.
  void load_state_dict(const nn::StateDict& sd);

  // Puts the state on `device`, as the first scale() does (an error if it is on another device):
  // for a rank that unscales gradients but scales no loss of its own (a pipeline's stages before
  // the last: Note [Loss scaling over a pipeline] in distributed/pipeline/schedule.h).
  void place_state(const Device& device);

 private:
  GradScalerOptions options_;
  Tensor scale_;           // float32 (1)
  Tensor growth_tracker_;  // int32 (1)
  Tensor found_inf_;       // float32 (1)
  double pending_scale_;   // the scale (and tracker) before the state has a device
  int64_t pending_tracker_ = 0;
  int64_t skipped_ = 0;
  Tensor skipped_on_device_;  // float32 (1): the steps skipped by a capturable optimizer
  bool unscaled_ = false;     // unscale_ ran this step
};

}  // namespace loom::amp
