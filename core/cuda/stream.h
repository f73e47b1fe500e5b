// Streams, events and the device guard. Each device has a current compute stream (a created,
// non-blocking stream, never the legacy default stream) and a communication stream for DDP;
// work is ordered between them with events, never with device-wide synchronisation.
// Leaves out: stream priorities and stream pools (one compute and one comm stream suffice here).
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/available.h"

namespace loom::cuda {

int current_device();
void set_device(int index);

// The stream kernels of `device` launch on. Settable (e.g. for graph capture, or a side stream).
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t s);
cudaStream_t comm_stream(int device);  // the communication stream (DDP's all-reduces)

// Makes `device` current for the scope, restoring the previous device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_;
};

// An event recorded on one stream and waited on by another (or by the host).
class Event {
 public:
  Event();  // created with cudaEventDisableTiming unless timing = true
  explicit Event(bool timing);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s);
  void wait(cudaStream_t s) const;  // s waits for the recorded work (no host block)
  void synchronize() const;
  float elapsed_ms(const Event& end) const;  // both recorded, timing enabled
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// synchronize(int device) is declared in core/cuda/available.h.

// ---- CUDA graph capture (core/cuda/graph.h) ----
bool is_capturing(cudaStream_t s);
// Throws loom::Error naming `what` if `s` is being captured into a CUDA graph: the host cannot
// wait for work that has not been launched. Every path that would synchronise calls this first.
void check_not_capturing(cudaStream_t s, const char* what);

}  // namespace loom::cuda
