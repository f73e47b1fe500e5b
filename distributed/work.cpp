// CompletionWork: a Work finished by the thread that runs the op.
#include "distributed/work.h"

namespace loom::distributed {

bool CompletionWork::wait(Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return false;
  }
  if (err_) std::rethrow_exception(err_);
  return true;
}

bool CompletionWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr CompletionWork::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return err_;
}

void CompletionWork::mark_done(std::exception_ptr err) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    err_ = std::move(err);
  }
  cv_.notify_all();
}

}  // namespace loom::distributed
