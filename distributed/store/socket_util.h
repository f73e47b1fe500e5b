// Small POSIX socket helpers shared by the store's server and client: resolve, listen, connect,
// send all bytes, receive exactly n bytes before a deadline.
// Leaves out: anything non-blocking (the server's poll loop handles its own sockets).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::distributed::net {

using Clock = std::chrono::steady_clock;

// A listening TCP socket bound to host:port (host "" = every interface); the bound port in `port`.
int listen_on(const std::string& host, int& port);
// One connection attempt to host:port; -1 (and the reason in `why`) on failure.
int try_connect(const std::string& host, int port, std::string& why);
void set_nodelay(int fd);
// Sends every byte; false when the peer is gone.
bool send_all(int fd, const void* p, size_t n);
// Receives exactly n bytes. 1: done; 0: the peer closed or failed (`why`); -1: the deadline passed.
int recv_exact(int fd, void* p, size_t n, Clock::time_point deadline, std::string& why);
// The address this host is reached at from `peer_host` (the local end of a UDP "connect"):
// 127.0.0.1 when the peer is on this machine.
std::string local_address_towards(const std::string& peer_host);

}  // namespace loom::distributed::net
