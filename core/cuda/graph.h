// CUDA graphs: record the kernels and copies that any sequence of loom ops queues on the current
// stream, then replay them with one launch. See Note [Graph capture] in core/cuda/graph.cpp.
// Leaves out: graph updates (cudaGraphExecUpdate) and capturing several streams that fork.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/allocator.h"

namespace loom::cuda {

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing on the current device: until capture_end, this thread's current stream is a
  // capture stream, ops queue work into the graph instead of running it, and their outputs come
  // from the graph's private memory pool. A host synchronisation in between raises loom::Error.
  void capture_begin();
  // Ends the capture and instantiates the graph (an error if the capture was invalidated).
  void capture_end();
  // Runs the captured work again on the current stream, reading and writing the same memory.
  void replay();

  bool ready() const { return exec_ != nullptr; }
  int device() const { return device_; }

 private:
  void abandon_capture() noexcept;

  int device_ = -1;
  cudaStream_t capture_stream_ = nullptr;
  cudaStream_t prev_stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  PoolId pool_ = 0;
  bool capturing_ = false;
};

}  // namespace loom::cuda
