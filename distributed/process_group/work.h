// Work: the handle an asynchronous collective returns (wait with a timeout, is_completed, the
// error it failed with), and CompletionWork, the host-side implementation the CPU backends use.
// Leaves out: CUDA ordering (NCCL's Work is in nccl_process_group.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

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

// Completed by whoever runs the op (a worker thread): mark_done() or mark_failed(message). A
// failure reaches the waiter as a loom::Error of its own (Note [Errors across threads]).
class CompletionWork : public Work {
 public:
  bool wait(Millis timeout = kNoTimeout) override;  // throws loom::Error(message) if it failed
  void synchronize() override { wait(); }
  bool is_completed() override;
  std::exception_ptr error() override;  // a new loom::Error(message) each call, or null
  void mark_done();
  void mark_failed(std::string message);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool failed_ = false;
  std::string message_;
};

// Note [Errors across threads]
// The worker thread that runs an op keeps only the message of its failure, and every wait() or
// error() makes a new loom::Error from it on the calling thread: no exception object is shared
// between threads. Sharing one through std::exception_ptr is correct (libstdc++ counts its
// references atomically), but that count lives in libstdc++, which is not built with
// ThreadSanitizer: when the worker dropped the last reference after the waiter had read what(),
// TSan saw a free racing with the read and reported it (docs/reliability.md). The message crosses
// under mu_, which TSan sees.

}  // namespace loom::distributed
