// TCPStoreServer: one background thread polls the listening socket and every client connection,
// decodes requests (Note [Store protocol]) and parks blocking get/wait until their keys appear.
// Leaves out: the client side (tcp_store.cpp).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/store_protocol.h"
#include "distributed/store/tcp_store.h"

namespace loom::distributed {

using net::Clock;
using wire::Type;

// Note [Store server loop]
// One thread, poll(2) over: a wake-up pipe (shutdown), the listening socket, every connection.
// Each connection has an input buffer; a complete message is handled at once, a partial one
// waits for more bytes (at most wire::kStallTimeoutMs). Clients send one request at a time, so a
// connection has at most one parked get/wait; while parked, its later bytes stay buffered. After
// every write to the keys, parked requests are retried; each poll wakes by the nearest deadline.
// Any protocol violation closes that connection only; the keys and other clients are untouched.
namespace {
struct Conn {
  int fd = -1;
  Bytes in;
  Bytes out;
  size_t out_at = 0;
  std::optional<Clock::time_point> partial_since;  // a message has begun but not ended
  // A parked Get (one key) or Wait (keys) with its deadline.
  bool parked = false;
  Type parked_type = Type::Ping;
  std::vector<std::string> keys;
  Clock::time_point deadline;
  bool closing = false;
  bool authenticated = false;  // sent the store's token (Note [Store token])
};

// Compares without an early exit, so the time taken says nothing about how much matched.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}
}  // namespace

// Note [Store token]
// With LOOM_STORE_TOKEN set (or a token given to the server), the first message of every
// connection must be Auth carrying that token; anything else (no Auth, a wrong token) is answered
// Failed and the connection is closed before the message is acted on, so a stray client cannot
// read, write, delete or wait on the job's keys. Clients (TCPStore) send Auth right after
// connecting when they have a token. loomrun's workers inherit the variable with the rest of the
// launcher's environment. The token is a shared secret against accidents and other users' stray
// processes on a shared network, not encryption: it travels in clear text.

struct TCPStoreServer::Impl {
  std::string token;  // empty: no handshake
  std::unordered_map<std::string, Bytes> data;
  std::list<Conn> conns;

  void reply(Conn& c, const Bytes& msg) { c.out.insert(c.out.end(), msg.begin(), msg.end()); }
  void reply_ok(Conn& c) { reply(c, wire::Writer(Type::Ok).finish()); }
  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!data.count(k)) return false;
    return true;
  }

  // Answers a parked request whose keys now exist, or whose deadline passed.
  void try_parked(Conn& c, Clock::time_point now) {
    if (!c.parked) return;
    if (has_all(c.keys)) {
      c.parked = false;
      if (c.parked_type == Type::Get)
        reply(c, wire::Writer(Type::Ok).bytes(data[c.keys[0]]).finish());
      else
        reply_ok(c);
    } else if (now >= c.deadline) {
      c.parked = false;
      reply(c, wire::Writer(Type::Timeout).finish());
    }
  }

  // Handles one complete request; throws loom::Error on a malformed payload.
  bool handle(Conn& c, uint8_t type, const uint8_t* p, size_t n) {
    wire::Request q = wire::decode_request(type, p, n);
    if (!token.empty() && !c.authenticated) {  // Note [Store token]
      bool ok = q.type == Type::Auth && same_token(q.token, token);
      if (!ok) {
        reply(c, wire::Writer(Type::Failed)
                     .str(q.type == Type::Auth
                              ? "store: wrong LOOM_STORE_TOKEN; this store refuses the client"
                              : "store: this store requires LOOM_STORE_TOKEN; the client sent "
                                "none")
                     .finish());
        flush(c);
        c.closing = true;
        return false;
      }
      c.authenticated = true;
      reply_ok(c);
      return false;
    }
    bool wrote = false;
    switch (q.type) {
      case Type::Set:
        data[q.keys[0]] = std::move(q.value);
        reply_ok(c);
        wrote = true;
        break;
      case Type::Get:
      case Type::Wait:
        c.parked = true;
        c.parked_type = q.type;
        c.keys = std::move(q.keys);
        c.deadline = Clock::now() +
                     std::chrono::milliseconds(std::clamp<int64_t>(q.number, 0, int64_t(1) << 40));
        try_parked(c, Clock::now());
        break;
      case Type::Add: {
        const std::string& k = q.keys[0];
        int64_t v = 0;
        auto it = data.find(k);
        if (it != data.end())
          v = std::strtoll(std::string(it->second.begin(), it->second.end()).c_str(), nullptr, 10);
        v += q.number;
        std::string s = std::to_string(v);
        data[k] = Bytes(s.begin(), s.end());
        reply(c, wire::Writer(Type::Ok).i64(v).finish());
        wrote = true;
        break;
      }
      case Type::CompareSet: {
        const std::string& k = q.keys[0];
        auto it = data.find(k);
        if ((it == data.end() && q.expected.empty()) ||
            (it != data.end() && it->second == q.expected)) {
          data[k] = q.value;
          wrote = true;
        }
        reply(c, wire::Writer(Type::Ok).bytes(data.count(k) ? data[k] : Bytes{}).finish());
        break;
      }
      case Type::Check:
        reply(c, wire::Writer(Type::Ok).i64(has_all(q.keys) ? 1 : 0).finish());
        break;
      case Type::Delete:
        reply(c, wire::Writer(Type::Ok).i64(data.erase(q.keys[0]) ? 1 : 0).finish());
        break;
      case Type::NumKeys:
        reply(c, wire::Writer(Type::Ok).i64(int64_t(data.size())).finish());
        break;
      case Type::Ping:
        reply_ok(c);
        break;
      case Type::Auth:
        reply(c, wire::Writer(Type::Failed)
                     .str("store: this store was started without LOOM_STORE_TOKEN but the client "
                          "has one; set the same LOOM_STORE_TOKEN for every process of the job")
                     .finish());
        break;
      default:
        LOOM_FAIL("store: message type ", int(type), " is not a request");
    }
    return wrote;
  }

  // Consumes complete messages from c.in. Returns true if a key was written.
  bool drain(Conn& c) {
    bool wrote = false;
    size_t at = 0;
    while (!c.parked && !c.closing && c.in.size() - at >= wire::kHeaderBytes) {
      wire::Header h;
      std::string why;
      if (!wire::parse_header(c.in.data() + at, h, why) || !wire::is_request(h.type)) {
        c.closing = true;  // Note [Store protocol]: a bad header closes this connection
        break;
      }
      if (c.in.size() - at - wire::kHeaderBytes < h.length) break;
      try {
        wrote |= handle(c, h.type, c.in.data() + at + wire::kHeaderBytes, h.length);
      } catch (const Error&) {
        c.closing = true;
        break;
      }
      at += wire::kHeaderBytes + h.length;
    }
    c.in.erase(c.in.begin(), c.in.begin() + std::ptrdiff_t(at));
    if (c.in.empty())
      c.partial_since.reset();
    else if (!c.partial_since)
      c.partial_since = Clock::now();
    return wrote;
  }

  void flush(Conn& c) {
    while (c.out_at < c.out.size()) {
      ssize_t k = send(c.fd, c.out.data() + c.out_at, c.out.size() - c.out_at, MSG_NOSIGNAL);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (k <= 0) {
        c.closing = true;
        return;
      }
      c.out_at += size_t(k);
    }
    c.out.clear();
    c.out_at = 0;
  }
};

namespace {
void serve(TCPStoreServer::Impl& s, int listen_fd, int wake_fd) {
  std::vector<pollfd> fds;
  std::vector<Conn*> order;
  for (;;) {
    auto now = Clock::now();
    int timeout_ms = 1000;
    for (auto& c : s.conns) {
      auto until = [&](Clock::time_point t) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
        timeout_ms = int(std::clamp<int64_t>(ms, 0, timeout_ms));
      };
      if (c.parked) until(c.deadline);
      if (c.partial_since)
        until(*c.partial_since + std::chrono::milliseconds(wire::kStallTimeoutMs));
    }
    fds.clear();
    order.clear();
    fds.push_back({wake_fd, POLLIN, 0});
    fds.push_back({listen_fd, POLLIN, 0});
    for (auto& c : s.conns) {
      short ev = POLLIN;
      if (c.out_at < c.out.size()) ev |= POLLOUT;
      fds.push_back({c.fd, ev, 0});
      order.push_back(&c);
    }
    int r = poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // shutdown
    if (fds[1].revents & POLLIN) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        net::set_nodelay(fd);
        s.conns.push_back(Conn{});
        s.conns.back().fd = fd;
      }
    }
    bool wrote = false;
    for (size_t i = 0; i < order.size(); ++i) {
      Conn& c = *order[i];
      short re = fds[i + 2].revents;
      if (re & POLLOUT) s.flush(c);
      if (re & (POLLIN | POLLHUP | POLLERR)) {
        uint8_t buf[65536];
        ssize_t k = recv(c.fd, buf, sizeof(buf), 0);
        if (k > 0) {
          c.in.insert(c.in.end(), buf, buf + k);
          wrote |= s.drain(c);
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          c.closing = true;  // the peer left (perhaps mid-message)
        }
      }
    }
    now = Clock::now();
    for (auto& c : s.conns) {
      if (wrote || c.parked) s.try_parked(c, now);
      if (!c.parked && !c.in.empty()) wrote |= s.drain(c);  // requests queued behind a parked one
      if (c.partial_since &&
          now - *c.partial_since > std::chrono::milliseconds(wire::kStallTimeoutMs))
        c.closing = true;  // half-sent message
      if (!c.closing) s.flush(c);
    }
    if (wrote)
      for (auto& c : s.conns)
        if (c.parked) {
          s.try_parked(c, now);
          s.flush(c);
        }
    for (auto it = s.conns.begin(); it != s.conns.end();) {
      if (it->closing) {
        close(it->fd);
        it = s.conns.erase(it);
      } else {
        ++it;
      }
    }
  }
}
}  // namespace

std::string store_token_from_env() {
  const char* t = std::getenv("LOOM_STORE_TOKEN");
  return t ? t : "";
}

TCPStoreServer::TCPStoreServer(const std::string& host, int port,
                               const std::optional<std::string>& token)
    : host_(host), port_(port), impl_(std::make_unique<Impl>()) {
  impl_->token = token ? *token : store_token_from_env();
  listen_fd_ = net::listen_on(host, port_);
  fcntl(listen_fd_, F_SETFL, O_NONBLOCK);
  LOOM_CHECK(pipe2(wake_, O_CLOEXEC) == 0, "TCPStore: pipe failed: ", std::strerror(errno));
  thread_ = std::thread([this] { serve(*impl_, listen_fd_, wake_[0]); });
}

TCPStoreServer::~TCPStoreServer() {
  char b = 1;
  if (write(wake_[1], &b, 1) < 0) { /* the thread still exits on close below */
  }
  if (thread_.joinable()) thread_.join();
  for (auto& c : impl_->conns) close(c.fd);
  close(listen_fd_);
  close(wake_[0]);
  close(wake_[1]);
}

}  // namespace loom::distributed
