// TCPStore: the Store over TCP. TCPStoreServer holds the keys and serves many clients from one
// background thread (poll); TCPStore is a client, and on rank 0 (is_server) also owns the server.
// With LOOM_STORE_TOKEN set, both sides use the token handshake (Note [Store token]).
// Leaves out: encryption (the token is a shared secret sent in clear) and persistence.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "distributed/store/store.h"

namespace loom::distributed {

// The value of LOOM_STORE_TOKEN ("" when unset).
std::string store_token_from_env();

// Serves the store on host:port until destroyed. A name or address binds to that address only
// (MASTER_ADDR); host "" or "0.0.0.0" listens on every interface, and only when asked so. port 0
// picks a free port: ask port(). A port already in use is an Error naming host:port.
// token: clients must present it first (Note [Store token]); nullopt reads LOOM_STORE_TOKEN, ""
// turns the handshake off.
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, int port,
                 const std::optional<std::string>& token = std::nullopt);
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
  // Sent in the handshake (and required by the server this store starts); nullopt reads
  // LOOM_STORE_TOKEN, "" means none.
  std::optional<std::string> token;
};

class TCPStore : public Store {
 public:
  // Connects to host:port, retrying with backoff until options.timeout (the server may start
  // later). With is_server, first starts a TCPStoreServer on host:port and connects to it.
  TCPStore(const std::string& host, int port, TCPStoreOptions options = {});
  ~TCPStore() override;

#define LOOM_STORE_METHOD(R, name, params) R name params override;
#include "distributed/store/store_methods.inc"
#undef LOOM_STORE_METHOD
  using Store::get;
  using Store::set;
  using Store::wait;

  int port() const { return port_; }  // the bound port when this process serves with port 0
  const std::string& host() const { return host_; }
  bool is_server() const { return server_ != nullptr; }

 private:
  TCPStore(std::shared_ptr<TCPStoreServer> server, const std::string& host, int port, Millis t,
           std::string token);
  struct Reply;
  Reply request(const Bytes& msg, Millis reply_timeout, const char* op, const std::string& key);
  void connect_with_retry();  // then the token handshake, when there is a token

  std::shared_ptr<TCPStoreServer> server_;
  std::string host_;
  int port_ = 0;
  std::string token_;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on this connection
};

}  // namespace loom::distributed
