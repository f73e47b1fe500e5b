// Store safety: the token handshake (LOOM_STORE_TOKEN) refuses clients without the token or with
// a wrong one before they touch a key; a stray client hammering a running two-process Gloo job
// neither joins nor disturbs it; the server binds to the address it is given only; a port in use
// is an error naming the address and the port. See docs/distributed.md, "Store safety".
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "distributed/spawn.h"
#include "distributed/store/store_protocol.h"
#include "distributed/store/tcp_store.h"
#include "support/errors.h"

using namespace loom;
using namespace loom::distributed;
using namespace std::chrono_literals;

using loom::test::error_of;

namespace {

std::shared_ptr<TCPStore> client(int port, const std::string& token) {
  return std::make_shared<TCPStore>(
      "127.0.0.1", port, TCPStoreOptions{.is_server = false, .timeout = 10s, .token = token});
}

// The error message of f(), or "" when it does not throw.

// connect() to addr:port; true when it succeeds.
bool can_connect(const char* addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, addr, &a.sin_addr);
  a.sin_port = htons(uint16_t(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// Sends one raw Set (no handshake) and returns the reply's type, or -1 when the server closed.
int raw_set(int port, const std::string& key) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -2;
  }
  Bytes m = wire::Writer(wire::Type::Set).str(key).bytes(Bytes{1, 2, 3}).finish();
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int type = -1;
  uint8_t head[wire::kHeaderBytes];
  if (send(fd, m.data(), m.size(), MSG_NOSIGNAL) == ssize_t(m.size()) &&
      recv(fd, head, sizeof(head), MSG_WAITALL) == ssize_t(sizeof(head)))
    type = head[5];
  close(fd);
  return type;
}

TEST(StoreToken, ClientsWithoutTheRightTokenTouchNoKey) {
  TCPStoreServer server("127.0.0.1", 0, std::string("s3cret"));
  auto good = client(server.port(), "s3cret");
  good->set("job/key", std::string("job value"));
  EXPECT_EQ(good->num_keys(), 1);

  // No token: the connection opens, but the first request is refused and nothing is stored.
  auto none = client(server.port(), "");
  std::string e = error_of([&] { none->set("job/key", std::string("overwritten")); });
  EXPECT_NE(e.find("requires LOOM_STORE_TOKEN"), std::string::npos) << e;
  // A wrong token: refused in the constructor, with the address in the message.
  e = error_of([&] { client(server.port(), "guess"); });
  EXPECT_NE(e.find("refused this process's LOOM_STORE_TOKEN"), std::string::npos) << e;
  EXPECT_NE(e.find("127.0.0.1:" + std::to_string(server.port())), std::string::npos) << e;
  EXPECT_NE(e.find("wrong LOOM_STORE_TOKEN"), std::string::npos) << e;
  // A raw Set without the handshake is answered Failed, not Ok.
  EXPECT_EQ(raw_set(server.port(), "job/key"), int(wire::Type::Failed));
  EXPECT_EQ(raw_set(server.port(), "stray"), int(wire::Type::Failed));

  EXPECT_EQ(good->get_string("job/key"), "job value");
  EXPECT_FALSE(good->check({"stray"}));
  EXPECT_EQ(good->num_keys(), 1);
  EXPECT_EQ(good->add("n", 2), 2);  // the authenticated connection still works
  auto again = good->clone();       // and so does a clone (it repeats the handshake)
  EXPECT_EQ(std::static_pointer_cast<TCPStore>(again)->add("n", 1), 3);
}

TEST(StoreToken, ATokenAgainstAServerWithoutOneIsAClearError) {
  TCPStoreServer server("127.0.0.1", 0, std::string(""));
  std::string e = error_of([&] { client(server.port(), "s3cret"); });
  EXPECT_NE(e.find("started without LOOM_STORE_TOKEN"), std::string::npos) << e;
  EXPECT_EQ(raw_set(server.port(), "k"), int(wire::Type::Ok));  // no token: open, as before
}

TEST(StoreToken, TheEnvironmentVariableIsTheDefault) {
  setenv("LOOM_STORE_TOKEN", "from-env", 1);
  TCPStore s("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 10s, .token = {}});
  unsetenv("LOOM_STORE_TOKEN");
  s.set("k", std::string("v"));  // this client sent the variable's token
  EXPECT_NE(error_of([&] { client(s.port(), "other"); }), "");
  EXPECT_EQ(client(s.port(), "from-env")->get_string("k"), "v");
}

TEST(StoreBind, TheServerListensOnItsAddressOnly) {
  // Every 127.x.y.z is this machine: a server bound to 127.0.0.1 is not reachable on 127.0.0.2,
  // one bound to every interface ("0.0.0.0", asked for explicitly) is.
  TCPStoreServer one("127.0.0.1", 0, std::string(""));
  EXPECT_TRUE(can_connect("127.0.0.1", one.port()));
  EXPECT_FALSE(can_connect("127.0.0.2", one.port()));
  TCPStoreServer all("0.0.0.0", 0, std::string(""));
  EXPECT_TRUE(can_connect("127.0.0.2", all.port()));
}

TEST(StoreBind, APortInUseNamesTheAddressAndThePort) {
  TCPStoreServer first("127.0.0.1", 0, std::string(""));
  int port = first.port();
  std::string e = error_of([&] { TCPStoreServer second("127.0.0.1", port, std::string("")); });
  EXPECT_NE(e.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e;
  EXPECT_NE(e.find("in use"), std::string::npos) << e;
  EXPECT_NE(e.find("MASTER_PORT"), std::string::npos) << e;
}

#ifdef LOOM_WITH_GLOO
TEST(StoreToken, AStrayClientNeitherJoinsNorDisturbsARunningJob) {
  // The launcher's arrangement: this process serves the job's store (with a token), two ranks
  // connect to it and run every collective against its reference (dist_tool.cpp). Meanwhile a
  // stray client keeps trying, without the token and with a wrong one, to write, delete and
  // count keys, and to join as a rank would.
  TCPStoreServer server("127.0.0.1", 0, std::string("job-token"));
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, accepted{0};
  std::thread stray([&] {
    while (!stop) {
      for (const char* key : {"world/rank_0", "world/0", "stray_was_here"}) {
        int t = raw_set(server.port(), key);
        (t == int(wire::Type::Ok) ? accepted : refused)++;
      }
      try {
        auto c = client(server.port(), "");
        c->delete_key("world/rank_1");
        accepted++;
      } catch (const Error&) {
        refused++;
      }
      try {
        client(server.port(), "wrong-token")->set("stray_was_here", std::string("x"));
        accepted++;
      } catch (const Error&) {
        refused++;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  auto run = test::run_workers(LOOM_DIST_TOOL, {"collectives"}, 2, server.port(),
                               {{"LOOM_TEST_BACKEND", "gloo"},
                                {"LOOM_STORE_EXTERNAL", "1"},
                                {"LOOM_STORE_TOKEN", "job-token"}},
                               240);
  stop = true;
  stray.join();
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r)
    EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << "\n" << run.summary();
  EXPECT_EQ(accepted.load(), 0);
  EXPECT_GT(refused.load(), 20) << "the stray client did not run alongside the job";
  auto owner = client(server.port(), "job-token");
  EXPECT_FALSE(owner->check({"stray_was_here"}));
  EXPECT_GT(owner->num_keys(), 0);  // the job's own keys are there
}
#endif

}  // namespace
