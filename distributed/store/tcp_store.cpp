// TCPStore, the client: one blocking connection, one request at a time (a mutex), connect with
// retry and backoff, replies read with a deadline. The server is tcp_store_server.cpp.
// Leaves out: reconnecting after the server went away (a lost store ends the job).
#include "distributed/store/tcp_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/store_protocol.h"

namespace loom::distributed {

using net::Clock;
using wire::Type;

namespace {
// A blocking get/wait is timed by the server; the client allows this much more for the reply.
constexpr Millis kReplyGrace{10000};
constexpr Millis kQuickReply{60000};  // set/add/check: answered at once by a live server

std::string seconds(Millis t) { return str(double(t.count()) / 1000.0, " s"); }
}  // namespace

struct TCPStore::Reply {
  Type type;
  Bytes payload;
};

TCPStore::TCPStore(const std::string& host, int port, TCPStoreOptions options)
    : host_(host), port_(port), token_(options.token ? *options.token : store_token_from_env()) {
  timeout_ = options.timeout;
  LOOM_CHECK(port >= 0 && port < 65536, "TCPStore: port ", port, " is out of range");
  if (options.is_server) {
    server_ = std::make_shared<TCPStoreServer>(host, port, token_);
    port_ = server_->port();
    if (host_.empty() || host_ == "0.0.0.0") host_ = "127.0.0.1";
  } else {
    LOOM_CHECK(port > 0, "TCPStore: a client needs the server's port (got 0)");
  }
  connect_with_retry();
}

TCPStore::TCPStore(std::shared_ptr<TCPStoreServer> server, const std::string& host, int port,
                   Millis t, std::string token)
    : server_(std::move(server)), host_(host), port_(port), token_(std::move(token)) {
  timeout_ = t;
  connect_with_retry();
}

TCPStore::~TCPStore() {
  if (fd_ >= 0) close(fd_);
}

std::shared_ptr<Store> TCPStore::clone() const {
  return std::shared_ptr<Store>(new TCPStore(server_, host_, port_, timeout_, token_));
}

void TCPStore::connect_with_retry() {
  auto deadline = Clock::now() + timeout_;
  Millis backoff{10};
  std::string why;
  for (;;) {
    fd_ = net::try_connect(host_, port_, why);
    if (fd_ >= 0) break;
    if (Clock::now() + backoff > deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis(1000));
  }
  LOOM_CHECK(fd_ >= 0, "TCPStore: could not connect to the store at ", host_, ":", port_,
             " within ", seconds(timeout_), " (last error: ", why,
             "); is rank 0 (or the launcher) running and MASTER_ADDR/MASTER_PORT right?");
  if (token_.empty()) return;
  // Note [Store token]: the first message; a refusal comes back as Failed.
  try {
    request(wire::Writer(Type::Auth).str(token_).finish(), kQuickReply, "auth", "");
  } catch (const Error& e) {
    LOOM_FAIL("TCPStore: the store at ", host_, ":", port_,
              " refused this process's LOOM_STORE_TOKEN: ", e.what());
  }
}

TCPStore::Reply TCPStore::request(const Bytes& msg, Millis reply_timeout, const char* op,
                                  const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_CHECK(fd_ >= 0, "TCPStore.", op, "('", key, "'): the connection to ", host_, ":", port_,
             " was lost earlier");
  auto lost = [&](const std::string& why) {
    close(fd_);
    fd_ = -1;
    LOOM_FAIL("TCPStore.", op, "('", key, "'): lost the store at ", host_, ":", port_, ": ", why,
              " (did rank 0 or the launcher exit?)");
  };
  if (!net::send_all(fd_, msg.data(), msg.size())) lost(std::strerror(errno));
  auto deadline = Clock::now() + reply_timeout;
  uint8_t head[wire::kHeaderBytes];
  std::string why;
  int r = net::recv_exact(fd_, head, sizeof(head), deadline, why);
  if (r == 0) lost(why);
  if (r < 0) lost(str("no reply within ", seconds(reply_timeout)));
  wire::Header h;
  if (!wire::parse_header(head, h, why)) lost("bad reply: " + why);
  Reply rep{Type(h.type), Bytes(h.length)};
  if (h.length > 0) {
    r = net::recv_exact(fd_, rep.payload.data(), h.length, deadline, why);
    if (r <= 0) lost(r == 0 ? why : "reply cut short");
  }
  if (rep.type == Type::Failed) {
    wire::Reader rd(rep.payload.data(), rep.payload.size());
    LOOM_FAIL("TCPStore.", op, "('", key, "'): ", rd.str());
  }
  return rep;
}

void TCPStore::set(const std::string& key, const Bytes& value) {
  request(wire::Writer(Type::Set).str(key).bytes(value).finish(), kQuickReply, "set", key);
}

Bytes TCPStore::get(const std::string& key, Millis timeout) {
  Reply r = request(wire::Writer(Type::Get).str(key).i64(timeout.count()).finish(),
                    timeout + kReplyGrace, "get", key);
  LOOM_CHECK(r.type == Type::Ok, "TCPStore.get('", key, "'): the key was not set within ",
             seconds(timeout));
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.bytes();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  Reply r = request(wire::Writer(Type::Add).str(key).i64(delta).finish(), kQuickReply, "add", key);
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.i64();
}

Bytes TCPStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Reply r = request(wire::Writer(Type::CompareSet).str(key).bytes(expected).bytes(desired).finish(),
                    kQuickReply, "compare_set", key);
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.bytes();
}

void TCPStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  std::string first = keys.empty() ? "" : keys[0];
  Reply r = request(wire::Writer(Type::Wait).list(keys).i64(timeout.count()).finish(),
                    timeout + kReplyGrace, "wait", first);
  if (r.type == Type::Ok) return;
  std::string missing;
  for (const auto& k : keys)
    if (!check({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
  LOOM_FAIL("TCPStore.wait: keys still missing after ", seconds(timeout), ": ", missing);
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  Reply r = request(wire::Writer(Type::Check).list(keys).finish(), kQuickReply, "check",
                    keys.empty() ? "" : keys[0]);
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.i64() != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  Reply r = request(wire::Writer(Type::Delete).str(key).finish(), kQuickReply, "delete_key", key);
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.i64() != 0;
}

int64_t TCPStore::num_keys() {
  Reply r = request(wire::Writer(Type::NumKeys).finish(), kQuickReply, "num_keys", "");
  wire::Reader rd(r.payload.data(), r.payload.size());
  return rd.i64();
}

}  // namespace loom::distributed
