// CompletionWork: a Work finished by the thread that runs the op.
#include "distributed/process_group/work.h"

#include "core/error.h"

namespace loom::distributed {

bool CompletionWork::wait(Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == kNoTimeout) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    return false;
  }
  if (failed_) throw Error(message_);  // Note [Errors across threads]
  return true;
}

bool CompletionWork::is_completed() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr CompletionWork::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_ ? std::make_exception_ptr(Error(message_)) : nullptr;
}

void CompletionWork::mark_done() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
}

void CompletionWork::mark_failed(std::string message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    failed_ = true;
    message_ = std::move(message);
  }
  cv_.notify_all();
}

}  // namespace loom::distributed
