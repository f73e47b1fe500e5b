// POSIX socket helpers for the store (see socket_util.h).
#include "distributed/store/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace loom::distributed::net {

namespace {
struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

int resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  std::string p = std::to_string(port);
  const char* h = (host.empty() || host == "0.0.0.0") ? nullptr : host.c_str();
  if (h == nullptr && passive) hints.ai_family = AF_INET;
  return getaddrinfo(h, p.c_str(), &hints, &out.list);
}
}  // namespace

int listen_on(const std::string& host, int& port) {
  AddrInfo ai;
  int rc = resolve(host, port, true, ai);
  LOOM_CHECK(rc == 0, "TCPStore: cannot resolve '", host, "' to listen on: ", gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 1024) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      return fd;
    }
    why = std::strerror(errno);
    close(fd);
  }
  LOOM_FAIL("TCPStore: cannot listen on ", host.empty() ? "*" : host, ":", port, ": ", why,
            port ? " (is another job using this port? set MASTER_PORT)" : "");
}

int try_connect(const std::string& host, int port, std::string& why) {
  AddrInfo ai;
  int rc = resolve(host, port, false, ai);
  if (rc != 0) {
    why = str("cannot resolve '", host, "': ", gai_strerror(rc));
    return -1;
  }
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      set_nodelay(fd);
      return fd;
    }
    why = std::strerror(errno);
    close(fd);
  }
  return -1;
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c += k;
    n -= size_t(k);
  }
  return true;
}

int recv_exact(int fd, void* p, size_t n, Clock::time_point deadline, std::string& why) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return -1;
    pollfd pfd{fd, POLLIN, 0};
    int r = poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) continue;
    ssize_t k = recv(fd, c, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) {
      why = k == 0 ? "the server closed the connection" : std::strerror(errno);
      return 0;
    }
    c += k;
    n -= size_t(k);
  }
  return 1;
}

std::string local_address_towards(const std::string& peer_host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(peer_host.c_str(), "9", &hints, &list) != 0 || !list) return "127.0.0.1";
  std::string out = "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, list->ai_addr, list->ai_addrlen) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char buf[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(list);
  return out;
}

}  // namespace loom::distributed::net
