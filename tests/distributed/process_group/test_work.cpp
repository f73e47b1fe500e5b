// CompletionWork, the Work of the CPU backends: done or failed from another thread, a failure
// reaching every waiter as a loom::Error of its own (Note [Errors across threads] in work.h).
// Leaves out: the ops behind it (test_gloo_process_group.cpp, dist_tool.cpp) and NCCL's Work
// (test_nccl_process_group.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "core/error.h"
#include "distributed/process_group/work.h"

using loom::Error;
using loom::distributed::CompletionWork;
using loom::distributed::Millis;

namespace {
// The message of the exception `p` holds ("" if it is no loom::Error).
std::string message_of(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    return e.what();
  } catch (...) {
  }
  return "";
}
}  // namespace

TEST(CompletionWork, DoneFromAnotherThreadWakesTheWaiter) {
  auto w = std::make_shared<CompletionWork>();
  EXPECT_FALSE(w->is_completed());
  EXPECT_FALSE(w->wait(Millis(20)));  // not done yet: false, no error
  std::thread t([w] {
    std::this_thread::sleep_for(Millis(50));
    w->mark_done();
  });
  EXPECT_TRUE(w->wait());
  t.join();
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(w->error(), nullptr);
}

TEST(CompletionWork, AFailureIsALoomErrorOfItsOwnForEveryCaller) {
  CompletionWork w;
  w.mark_failed("all_reduce #4 (8 float32 elements) failed on rank 1");
  EXPECT_TRUE(w.is_completed());
  for (int i = 0; i < 2; ++i) {  // every wait throws, with the message as it was given
    try {
      w.wait();
      ADD_FAILURE() << "wait() of a failed Work returned";
    } catch (const Error& e) {
      EXPECT_STREQ(e.what(), "all_reduce #4 (8 float32 elements) failed on rank 1");
    }
  }
  std::exception_ptr a = w.error(), b = w.error();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(message_of(a), "all_reduce #4 (8 float32 elements) failed on rank 1");
  EXPECT_EQ(message_of(b), message_of(a));
  // Two live exception_ptrs to one object compare equal: these are two objects, so no caller
  // shares an exception object with another thread.
  EXPECT_NE(a, b);
}

// The pattern of `pg->barrier()->synchronize()` failing with Gloo: the waiter's reference to the
// Work goes while the error unwinds, before its handler reads what(); the worker thread drops the
// last reference afterwards, freeing the Work. While the Work held one std::exception_ptr for all
// (rethrown as the same object), the worker thread freed the exception object the handler had
// read, and ThreadSanitizer reported that free against the read (their order is kept only by
// libstdc++'s uninstrumented reference count). The assertions check the message in every build.
TEST(CompletionWork, TheWorkerDroppingTheLastReferenceIsNoRace) {
  auto w = std::make_shared<CompletionWork>();
  std::thread t([held = w]() mutable {
    held->mark_failed("barrier #2 failed on rank 0 after 0.1 s (did a peer exit?)");
    std::this_thread::sleep_for(Millis(300));  // the waiter has caught and read it meanwhile
    held.reset();                              // the last reference: frees the Work here
  });
  std::string got;
  try {
    std::shared_ptr<CompletionWork> mine = std::move(w);  // released while the error unwinds
    mine->wait();
  } catch (const Error& e) {
    got = e.what();
  }
  t.join();
  EXPECT_EQ(got, "barrier #2 failed on rank 0 after 0.1 s (did a peer exit?)");
}
