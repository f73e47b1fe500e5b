// Store: the key-value store processes rendezvous through (abstract), and PrefixStore, which puts
// one group's keys under a prefix. The TCP implementation is distributed/store/tcp_store.h.
// Leaves out: authentication (a later LOOM_STORE_TOKEN; see Note [Store protocol]).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loom::distributed {

using Bytes = std::vector<uint8_t>;
using Millis = std::chrono::milliseconds;

// Every blocking call takes a timeout; timeout() is what calls without one use (default 5 min).
// Failures (timeout, lost connection, server gone) throw loom::Error naming the op and the key.
class Store {
 public:
  virtual ~Store() = default;

  // set, get, add, compare_set, wait, check, delete_key, num_keys, clone (store_methods.inc says
  // what each does).
#define LOOM_STORE_METHOD(R, name, params) virtual R name params = 0;
#include "distributed/store/store_methods.inc"
#undef LOOM_STORE_METHOD
  Bytes get(const std::string& key) { return get(key, timeout_); }
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  void set_timeout(Millis t) { timeout_ = t; }
  Millis timeout() const { return timeout_; }

  // Strings in and out, for the common case.
  void set(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key, Millis timeout) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
  std::string get_string(const std::string& key) { return get_string(key, timeout_); }

 protected:
  Millis timeout_ = std::chrono::minutes(5);
};

// Puts every key under "<prefix>/": new_group's communicators rendezvous without colliding.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  // num_keys: the base store's count (all prefixes).
#define LOOM_STORE_METHOD(R, name, params) R name params override;
#include "distributed/store/store_methods.inc"
#undef LOOM_STORE_METHOD

  using Store::get;
  using Store::set;
  using Store::wait;
  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string join(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> join(const std::vector<std::string>& keys) const;
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace loom::distributed
