// Test helpers for the loom::Error a bad call throws: its message, and a check that the message
// names every expected part. Leaves out: other exception types (they propagate, and GoogleTest
// reports them as failures) and checks that a call succeeds (EXPECT_NO_THROW does that).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace loom::test {

// The message of the loom::Error that f() throws; "" and a test failure when it throws nothing.
template <class F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error, but nothing was thrown";
  return "";
}

// f() throws a loom::Error whose message contains every one of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  std::string msg = error_of(std::forward<F>(f));
  if (msg.empty()) return;  // error_of has reported the missing error
  for (const std::string& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
}

}  // namespace loom::test
