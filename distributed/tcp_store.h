// TCPStore: the Store over TCP. TCPStoreServer holds the keys and serves many clients from one
// background thread (poll); TCPStore is a client, and on rank 0 (is_server) also owns the server.
// Leaves out: authentication (LOOM_STORE_TOKEN, later) and persistence (the keys live in memory).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/store.h"

namespace loom::distributed {

// Serves the store on host:port until destroyed. host "" or "0.0.0.0" listens on every interface;
// a name or address binds to that address (MASTER_ADDR). port 0 picks a free port: ask port().
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  struct Impl;

 private:
  std::string host_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
};

struct TCPStoreOptions {
  bool is_server = false;                    // also serve the store (then port may be 0)
  Millis timeout = std::chrono::minutes(5);  // connect and default get/wait timeout
};

class TCPStore : public Store {
 public:
  // Connects to host:port, retrying with backoff until options.timeout (the server may start
  // later). With is_server, first starts a TCPStoreServer on host:port and connects to it.
  TCPStore(const std::string& host, int port, TCPStoreOptions options = {});
  ~TCPStore() override;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;
  std::shared_ptr<Store> clone() const override;
  using Store::get;
  using Store::set;
  using Store::wait;

  int port() const { return port_; }  // the bound port when this process serves with port 0
  const std::string& host() const { return host_; }
  bool is_server() const { return server_ != nullptr; }

 private:
  TCPStore(std::shared_ptr<TCPStoreServer> server, const std::string& host, int port, Millis t);
  struct Reply;
  Reply request(const Bytes& msg, Millis reply_timeout, const char* op, const std::string& key);
  void connect_with_retry();

  std::shared_ptr<TCPStoreServer> server_;
  std::string host_;
  int port_ = 0;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on this connection
};

}  // namespace loom::distributed
