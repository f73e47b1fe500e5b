// ScopedValue: gives a variable a value for a scope and puts back the one it held before, also
// when the scope is left by an exception (a flag such as "inside join", a pointer such as "the
// parameter being updated"). Leaves out: thread-local or atomic variables' own rules (the
// caller's).
#pragma once

#include <utility>

namespace loom {

template <typename T>
class ScopedValue {
 public:
  ScopedValue(T& var, T value) : var_(var), old_(std::exchange(var, std::move(value))) {}
  ~ScopedValue() { var_ = std::move(old_); }
  ScopedValue(const ScopedValue&) = delete;
  ScopedValue& operator=(const ScopedValue&) = delete;

 private:
  T& var_;
  T old_;
};

}  // namespace loom
