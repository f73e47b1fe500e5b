// CUDA graph capture and replay (core/cuda/graph.h).
// Leaves out: per-replay random offsets (see the Note).
#include "core/cuda/graph.h"

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

// Note [Graph capture]
// capture_begin makes a fresh stream the calling thread's current stream (after it waits for the
// work already queued on the old one) and starts a thread-local capture there, so that other
// threads keep running eagerly. Every loom op launches on the current stream, so the whole
// sequence lands in the graph. Memory: the caching allocator serves allocations made on the
// capture stream from a private pool (core/cuda/allocator.h) which stays reserved while the
// graph lives, because every replay writes the same addresses; outputs of the captured ops are
// therefore overwritten by each replay, like PyTorch's static outputs.
// What cannot be captured: anything that waits on the host (item(), to_vector(), copies to the
// host, copies from pageable host memory, synchronize(), empty_cache()); each checks
// check_not_capturing first and raises an error instead of invalidating the capture.
// Random ops are captured with their (seed, offset) fixed: every replay draws the same numbers.

CudaGraph::~CudaGraph() {
  if (capturing_) abandon_capture();
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (pool_) {
    try {
      release_pool(device_, pool_);
    } catch (...) {
    }
  }
  if (capture_stream_) cudaStreamDestroy(capture_stream_);
}

void CudaGraph::capture_begin() {
  LOOM_CHECK(!capturing_ && !exec_ && !graph_, "CudaGraph::capture_begin: this graph already ",
             capturing_ ? "is capturing" : "holds a capture (make a new CudaGraph)");
  device_ = current_device();
  DeviceGuard g(device_);
  prev_stream_ = current_stream(device_);
  check_not_capturing(prev_stream_, "CudaGraph::capture_begin (nested capture)");
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking));
  {
    Event ready;
    ready.record(prev_stream_);
    ready.wait(capture_stream_);
  }
  pool_ = begin_pool_capture(device_, capture_stream_);
  set_current_stream(device_, capture_stream_);
  cudaError_t err = cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    set_current_stream(device_, prev_stream_);
    end_pool_capture(device_, pool_);
    LOOM_CUDA_CHECK(err);
  }
  capturing_ = true;
}

void CudaGraph::capture_end() {
  LOOM_CHECK(capturing_,
             "CudaGraph::capture_end: no capture in progress (call capture_begin first)");
  DeviceGuard g(device_);
  cudaError_t err = cudaStreamEndCapture(capture_stream_, &graph_);
  capturing_ = false;
  set_current_stream(device_, prev_stream_);
  end_pool_capture(device_, pool_);
  if (err != cudaSuccess) cudaGetLastError();
  LOOM_CHECK(err == cudaSuccess && graph_ != nullptr,
             "CudaGraph::capture_end: the capture failed: ", cudaGetErrorName(err), " (",
             cudaGetErrorString(err),
             "); an operation that is not allowed during capture was called inside it");
  LOOM_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::replay() {
  LOOM_CHECK(exec_,
             "CudaGraph::replay: nothing captured yet (capture_begin ... capture_end first)");
  DeviceGuard g(device_);
  LOOM_CUDA_CHECK(cudaGraphLaunch(exec_, current_stream(device_)));
}

void CudaGraph::abandon_capture() noexcept {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(capture_stream_, &partial);
  cudaGetLastError();
  if (partial) cudaGraphDestroy(partial);
  capturing_ = false;
  try {
    set_current_stream(device_, prev_stream_);
    end_pool_capture(device_, pool_);
  } catch (...) {
  }
}

}  // namespace loom::cuda
