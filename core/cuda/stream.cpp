// Streams, events and the device guard (core/cuda/stream.h).
// Leaves out: stream pools and priorities.
#include "core/cuda/stream.h"

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device_error.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

// Note [Current streams]
// Each device has one compute stream and one communication stream, created on first use with
// cudaStreamNonBlocking so they never wait for (or make wait) the legacy default stream. The
// current stream is per thread: set_current_stream changes it for the calling thread only (a
// graph capture on one thread must not pull other threads' work into the graph). A thread that
// never set one uses the device's compute stream.

constexpr int kMaxDevices = kMaxCudaDevices;

struct DeviceStreams {
  std::once_flag once;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
};

DeviceStreams& streams_of(int device) {
  static std::array<DeviceStreams, kMaxDevices>* all = new std::array<DeviceStreams, kMaxDevices>();
  LOOM_CHECK(device >= 0 && device < device_count(), "cuda:", device,
             " does not exist: this machine has ", device_count(), " CUDA device(s)");
  DeviceStreams& s = (*all)[size_t(device)];
  std::call_once(s.once, [&] {
    DeviceGuard g(device);
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.compute, cudaStreamNonBlocking));
    LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&s.comm, cudaStreamNonBlocking));
  });
  return s;
}

thread_local std::array<cudaStream_t, kMaxDevices> tls_current{};  // nullptr: the compute stream

}  // namespace

int current_device() {
  int d = 0;
  LOOM_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  LOOM_CHECK(index >= 0 && index < device_count(), "set_device: cuda:", index,
             " does not exist: this machine has ", device_count(), " CUDA device(s)");
  LOOM_CUDA_CHECK(cudaSetDevice(index));
}

cudaStream_t current_stream(int device) {
  DeviceStreams& s = streams_of(device);
  cudaStream_t t = tls_current[size_t(device)];
  return t ? t : s.compute;
}

void set_current_stream(int device, cudaStream_t s) {
  streams_of(device);  // checks the index
  tls_current[size_t(device)] = s;
}

cudaStream_t comm_stream(int device) { return streams_of(device).comm; }

DeviceGuard::DeviceGuard(int device) : prev_(-1) {
  LOOM_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) LOOM_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != prev_ && prev_ >= 0) cudaSetDevice(prev_);
}

Event::Event() : Event(false) {}

Event::Event(bool timing) {
  LOOM_CUDA_CHECK(
      cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}

void Event::record(cudaStream_t s) { LOOM_CUDA_CHECK(cudaEventRecord(e_, s)); }

void Event::wait(cudaStream_t s) const { LOOM_CUDA_CHECK(cudaStreamWaitEvent(s, e_, 0)); }

void Event::synchronize() const { LOOM_CUDA_CHECK(cudaEventSynchronize(e_)); }

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, e_, end.e_));
  return ms;
}

void synchronize(int device) {
  cudaStream_t s = current_stream(device);
  check_not_capturing(s, "synchronize");
  LOOM_CUDA_CHECK(cudaStreamSynchronize(s));
  check_device_errors(device);
}

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  LOOM_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  return st != cudaStreamCaptureStatusNone;
}

void check_not_capturing(cudaStream_t s, const char* what) {
  LOOM_CHECK(
      !is_capturing(s), what,
      ": this would make the host wait for the GPU, but the stream is being captured into a CUDA "
      "graph, whose work has not run yet (move host reads such as item(), to_vector() and copies "
      "to "
      "the CPU out of the captured region)");
}

}  // namespace loom::cuda
