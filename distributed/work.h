// Work: the handle an asynchronous collective returns (wait with a timeout, is_completed, the
// error it failed with), and CompletionWork, the host-side implementation the CPU backends use.
// Leaves out: CUDA ordering (NCCL's Work is in nccl_process_group.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

namespace loom::distributed {

using Millis = std::chrono::milliseconds;
constexpr Millis kNoTimeout = Millis::max();

class Work {
 public:
  virtual ~Work() = default;
  // Makes the result usable by the caller and rethrows the op's error. CPU backends: blocks the
  // host until the op is done; returns false if it is not done within `timeout` (the op goes on,
  // and fails on its own with the group's collective timeout). CUDA (NCCL): makes the current
  // compute stream wait for the op (no host block) and returns true.
  virtual bool wait(Millis timeout = kNoTimeout) = 0;
  // Blocks the host until the op has finished (on the GPU too); rethrows its error.
  virtual void synchronize() = 0;
  virtual bool is_completed() = 0;
  // The error the op failed with, or null (not failed, or not finished yet).
  virtual std::exception_ptr error() = 0;
};

// Completed by whoever runs the op (a worker thread): mark_done(nullptr) or mark_done(error).
class CompletionWork : public Work {
 public:
  bool wait(Millis timeout = kNoTimeout) override;
  void synchronize() override { wait(); }
  bool is_completed() override;
  std::exception_ptr error() override;
  void mark_done(std::exception_ptr err);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr err_;
};

}  // namespace loom::distributed
