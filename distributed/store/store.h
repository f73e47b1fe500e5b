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

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Blocks until `key` exists (set by anyone), then returns its value; an error after `timeout`.
  virtual Bytes get(const std::string& key, Millis timeout) = 0;
  Bytes get(const std::string& key) { return get(key, timeout_); }
  // Atomically adds `delta` to the integer stored at `key` (absent = 0) and returns the sum.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (an absent key matches an empty
  // `expected`), and returns the value after the call.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;
  // Blocks until every key exists; an error naming the missing keys after `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // True when every key exists (no blocking).
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Removes `key`; true if it existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual int64_t num_keys() = 0;
  // A new handle on the same store with its own connection, for another thread (a blocked get
  // on one connection must not hold up, e.g., the collective log's writer).
  virtual std::shared_ptr<Store> clone() const = 0;

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

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;  // the base store's count (all prefixes)
  std::shared_ptr<Store> clone() const override;

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
