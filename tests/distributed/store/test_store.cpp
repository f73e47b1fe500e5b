// The TCP store: every operation, blocking get and wait, timeouts, 16 concurrent clients, and a
// server that survives malformed, oversized and truncated messages from raw sockets.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "distributed/store/store_protocol.h"
#include "distributed/store/tcp_store.h"

using namespace loom;
using namespace loom::distributed;
using namespace std::chrono_literals;

namespace {
std::shared_ptr<TCPStore> serve() {
  return std::make_shared<TCPStore>(
      "127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 10s, .token = {}});
}
std::shared_ptr<TCPStore> client(int port) {
  return std::make_shared<TCPStore>(
      "127.0.0.1", port, TCPStoreOptions{.is_server = false, .timeout = 10s, .token = {}});
}

TEST(TCPStore, Operations) {
  auto s = serve();
  ASSERT_GT(s->port(), 0);
  auto c = client(s->port());
  s->set("a", std::string("hello"));
  EXPECT_EQ(c->get_string("a"), "hello");
  EXPECT_EQ(c->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -2), 3);
  EXPECT_EQ(c->get_string("n"), "3");
  EXPECT_TRUE(c->check({"a", "n"}));
  EXPECT_FALSE(c->check({"a", "missing"}));
  Bytes v1{'1'}, v2{'2'};
  EXPECT_EQ(c->compare_set("cas", {}, v1), v1);  // absent matches empty
  EXPECT_EQ(c->compare_set("cas", v2, v2), v1);  // mismatch: unchanged
  EXPECT_EQ(c->compare_set("cas", v1, v2), v2);
  EXPECT_EQ(c->num_keys(), 3);
  EXPECT_TRUE(c->delete_key("a"));
  EXPECT_FALSE(c->delete_key("a"));
  EXPECT_FALSE(c->check({"a"}));
  PrefixStore p("g1", c);
  p.set("k", std::string("v"));
  EXPECT_EQ(s->get_string("g1/k"), "v");
  EXPECT_TRUE(p.check({"k"}));
}

TEST(TCPStore, GetBlocksUntilSetAndTimesOut) {
  auto s = serve();
  auto c = client(s->port());
  std::thread setter([&] {
    auto c2 = client(s->port());
    std::this_thread::sleep_for(200ms);
    c2->set("late", std::string("x"));
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c->get_string("late", 5000ms), "x");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  c->wait({"late"}, 1000ms);
  setter.join();
  t0 = std::chrono::steady_clock::now();
  try {
    c->get("never", 300ms);
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'never'"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_THROW(c->wait({"late", "never"}, 200ms), Error);
  EXPECT_EQ(c->get_string("late"), "x");  // the connection still works after a timeout
}

TEST(TCPStore, ClientRetriesUntilTheServerStartsThenGivesUp) {
  int port;
  {
    TCPStoreServer probe("127.0.0.1", 0);
    port = probe.port();
  }
  std::unique_ptr<TCPStoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    late = std::make_unique<TCPStoreServer>("127.0.0.1", port);
  });
  auto c = client(port);  // connects once the server is up
  c->set("k", std::string("v"));
  starter.join();
  late.reset();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(TCPStore("127.0.0.1", port,
                        TCPStoreOptions{.is_server = false, .timeout = 500ms, .token = {}}),
               Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST(TCPStore, SixteenConcurrentClients) {
  auto s = serve();
  constexpr int kClients = 16, kAdds = 200;
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int i = 0; i < kClients; ++i) {
    ts.emplace_back([&, i] {
      try {
        auto c = client(s->port());
        for (int k = 0; k < kAdds; ++k) c->add("counter", 1);
        c->set("done" + std::to_string(i), std::string("1"));
        // Everyone waits for everyone: blocked gets on 16 connections at once.
        for (int j = 0; j < kClients; ++j) c->get("done" + std::to_string(j), 20000ms);
        if (c->get_string("counter") != std::to_string(kClients * kAdds)) ++failures;
      } catch (const std::exception&) {
        ++failures;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(s->get_string("counter"), std::to_string(kClients * kAdds));
}

int raw_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// True when the server closed `fd` (recv returns 0) within 2 s.
bool closed_by_server(int fd) {
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b[64];
  ssize_t k = recv(fd, b, sizeof(b), 0);
  return k == 0;
}

TEST(TCPStore, BadMessagesCloseOnlyTheirConnection) {
  auto s = serve();
  auto good = client(s->port());
  good->set("k", std::string("v"));
  // A client parked in a blocking get while the bad ones come and go.
  std::thread waiter([&] {
    auto c = client(s->port());
    EXPECT_EQ(c->get_string("later", 10000ms), "ok");
  });
  {  // garbage: wrong magic
    int fd = raw_connect(s->port());
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    ASSERT_GT(send(fd, junk, sizeof(junk), 0), 0);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  {  // oversized: a header announcing 1 GiB
    Bytes m = wire::Writer(wire::Type::Set).finish();
    uint32_t huge = 1u << 30;
    std::memcpy(m.data() + 8, &huge, 4);
    int fd = raw_connect(s->port());
    ASSERT_GT(send(fd, m.data(), m.size(), 0), 0);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  {  // well-framed but malformed payload: a key longer than the payload
    Bytes m = wire::Writer(wire::Type::Set).i64(int64_t(1) << 40).finish();
    int fd = raw_connect(s->port());
    ASSERT_GT(send(fd, m.data(), m.size(), 0), 0);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  {  // truncated: half a message, then the client goes away
    Bytes m = wire::Writer(wire::Type::Set).str("trunc").bytes(Bytes(1000, 7)).finish();
    int fd = raw_connect(s->port());
    ASSERT_GT(send(fd, m.data(), m.size() / 2, 0), 0);
    close(fd);
  }
  {  // a reply type sent as a request
    Bytes m = wire::Writer(wire::Type::Ok).finish();
    int fd = raw_connect(s->port());
    ASSERT_GT(send(fd, m.data(), m.size(), 0), 0);
    EXPECT_TRUE(closed_by_server(fd));
    close(fd);
  }
  // The server still serves the others, and the half-sent key was never stored.
  EXPECT_EQ(good->get_string("k"), "v");
  EXPECT_FALSE(good->check({"trunc"}));
  auto fresh = client(s->port());
  fresh->set("later", std::string("ok"));
  waiter.join();
  EXPECT_EQ(fresh->add("x", 1), 1);
}
}  // namespace
