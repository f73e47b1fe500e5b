// Errors found by kernels (an index or class target out of range): the kernel skips the bad
// element and records the first such error in a small slot of mapped host memory; the host reads
// the slot after its next synchronisation and throws a loom::Error naming the op and the value.
// Leaves out: device-side assert (it would poison the CUDA context for the rest of the process).
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace loom::cuda {

// Note [Errors found on the device]
// Checking an index tensor that lives on the GPU on the host would copy it back and synchronise
// every call (and could not be captured in a CUDA graph). Instead the kernel checks each index
// as it reads it, writes nothing out of bounds, and reports the first bad one here; the error
// surfaces at the next synchronize(), item() or device-to-host copy, naming the op and the value.

enum class DeviceOp : int {
  None = 0,
  IndexSelect,
  IndexAdd,
  IndexCopy,
  NllLoss,
  NllLossBackward,
  CrossEntropy,  // the nll_loss kernels, called by cross_entropy: the error names the user's op
  CrossEntropyBackward,
  EmbeddingBackward,
  Rope  // a position outside rope's cos/sin table (autograd/ops/rope.cpp)
};

struct DeviceErrorSlot {
  int op;  // DeviceOp; 0 = no error
  int pad;
  long long value;     // the offending index or target
  long long position;  // where it was read
  long long limit;     // the valid range is [0, limit)
};

// The slot of `device` (mapped pinned host memory, addressable from kernels of that device).
DeviceErrorSlot* device_error_slot(int device);

// Throws loom::Error if a kernel of `device` recorded an error (and clears it). Call it only after
// the host synchronised with the work that could have recorded it.
void check_device_errors(int device);

#if defined(__CUDACC__)
// Records the first error on the device; later ones are dropped.
__device__ inline void report_device_error(DeviceErrorSlot* slot, DeviceOp op, long long value,
                                           long long position, long long limit) {
  if (atomicCAS(&slot->op, 0, -1) == 0) {  // claim the slot, fill it, then publish the op
    slot->value = value;
    slot->position = position;
    slot->limit = limit;
    __threadfence_system();
    atomicExch(&slot->op, int(op));
  }
}
#endif

}  // namespace loom::cuda
