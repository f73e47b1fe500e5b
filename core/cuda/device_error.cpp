// The mapped error slot of each device (see Note [Errors found on the device]).
#include "core/cuda/device_error.h"

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/error.h"

namespace loom::cuda {

namespace {

const char* op_label(int op) {
  switch (DeviceOp(op)) {
    case DeviceOp::IndexSelect:
      return "index_select: index";
    case DeviceOp::IndexAdd:
      return "index_add: index";
    case DeviceOp::IndexCopy:
      return "index_copy_: index";
    case DeviceOp::NllLoss:
      return "nll_loss: target";
    case DeviceOp::NllLossBackward:
      return "nll_loss_backward: target";
    case DeviceOp::CrossEntropy:
      return "cross_entropy: target";
    case DeviceOp::CrossEntropyBackward:
      return "cross_entropy_backward: target";
    case DeviceOp::EmbeddingBackward:
      return "embedding_backward: id";
    case DeviceOp::Rope:
      return "rope: position";
    default:
      return "a kernel: value";
  }
}

}  // namespace

DeviceErrorSlot* device_error_slot(int device) {
  static std::mutex mu;
  static std::vector<DeviceErrorSlot*> slots;
  std::lock_guard<std::mutex> lock(mu);
  if (slots.empty()) slots.resize(size_t(device_count()), nullptr);
  LOOM_CHECK(device >= 0 && device < int(slots.size()),
             "device_error_slot: no device cuda:", device);
  if (!slots[size_t(device)]) {
    DeviceGuard g(device);
    void* p = nullptr;
    LOOM_CUDA_CHECK(
        cudaHostAlloc(&p, sizeof(DeviceErrorSlot), cudaHostAllocMapped | cudaHostAllocPortable));
    auto* s = static_cast<DeviceErrorSlot*>(p);
    *s = DeviceErrorSlot{0, 0, 0, 0, 0};
    void* dp = nullptr;
    LOOM_CUDA_CHECK(cudaHostGetDevicePointer(&dp, p, 0));
    LOOM_CHECK(
        dp == p,
        "device_error_slot: mapped memory has a different device address (no unified addressing?)");
    slots[size_t(device)] = s;
  }
  return slots[size_t(device)];
}

void check_device_errors(int device) {
  volatile DeviceErrorSlot* s = device_error_slot(device);
  int op = s->op;
  if (op <= 0) return;
  long long value = s->value, position = s->position, limit = s->limit;
  s->op = 0;
  LOOM_FAIL(op_label(op), " ", value, " (position ", position, ") is out of range [0, ", limit,
            ") -- found by a kernel on cuda:", device,
            "; the bad element was skipped, so results computed "
            "since are wrong");
}

}  // namespace loom::cuda
