// CollectiveLog (distributed/process_group/collective_log.h): sequence numbers, each op's
// description, the record each rank publishes to the store, and the timeout message that names the
// ranks that did not arrive (Note [Timeout errors]), and the departures of Note [Who left] (a
// stopped heartbeat, its gone/<rank> record read by another survivor). One process on a real TCP
// store; the other ranks' records are written to the store by the test, as their publishers would.
// Leaves out: a real timeout in a multi-process job
// (tests/distributed/process_group/test_gloo_process_group.cpp has those).
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/error.h"
#include "distributed/process_group/collective_log.h"
#include "distributed/store/tcp_store.h"

using namespace loom;
using namespace loom::distributed;
using namespace std::chrono_literals;

namespace {

std::shared_ptr<TCPStore> serve() {
  return std::make_shared<TCPStore>(
      "127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 10s, .token = {}});
}

// The value under `key` once it equals `want`, or the last value seen after 5 s (the publisher
// writes from its own thread, at most every 50 ms).
std::string wait_for(Store& store, const std::string& key, const std::string& want) {
  std::string got;
  for (auto end = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < end;) {
    if (store.check({key})) {
      got = store.get_string(key, 1s);
      if (got == want) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  return got;
}

// A store that says "absent" at the first check() of each key and tells the truth after: the
// moment before a rank writes its key, seen by a waiter whose next look comes after the write.
class LateStore : public Store {
 public:
  explicit LateStore(std::shared_ptr<Store> s) : s_(std::move(s)) {}
  void set(const std::string& k, const Bytes& v) override { s_->set(k, v); }
  Bytes get(const std::string& k, Millis t) override { return s_->get(k, t); }
  int64_t add(const std::string& k, int64_t d) override { return s_->add(k, d); }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return s_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& k, Millis t) override { s_->wait(k, t); }
  bool check(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys)
      if (seen_.insert(k).second) return false;
    return s_->check(keys);
  }
  bool delete_key(const std::string& k) override { return s_->delete_key(k); }
  int64_t num_keys() override { return s_->num_keys(); }
  std::shared_ptr<Store> clone() const override { return s_->clone(); }

 private:
  std::shared_ptr<Store> s_;
  std::set<std::string> seen_;
};

}  // namespace

// Rank 1 wrote its key and then left (DDP's layout check: a rank that sees the mismatch fails
// at once). A waiter whose first look missed the key and whose next look at the departures sees
// rank 1 gone must still take the key, not name rank 1 as gone before it arrived.
TEST(CollectiveLog, ARankThatWroteItsKeyAndThenLeftIsNotNamedByTheWait) {
  auto store = serve();
  CollectiveLog log(store, 0, 2);
  store->set("layout/1", Bytes{1});
  store->set("left/1", Bytes{'x'});
  LateStore late(store);
  EXPECT_NO_THROW(log.wait_for_keys(late, {"layout/1"}, {1}, 5s, "comparing layouts"));
  // A rank that left without writing its key is still named at once.
  LateStore late2(store);
  EXPECT_THROW(log.wait_for_keys(late2, {"layout/9"}, {1}, 5s, "comparing layouts"), Error);
}

TEST(CollectiveLog, DescribeNamesOpSequenceAndSize) {
  EXPECT_EQ((OpRecord{"all_reduce", 17, 4096, DType::F32, -1}).describe(),
            "all_reduce #17 (4096 float32 elements)");
  EXPECT_EQ((OpRecord{"broadcast", 2, 1, DType::I64, -1}).describe(),
            "broadcast #2 (1 int64 element)");
  EXPECT_EQ((OpRecord{"barrier", 5, 0, DType::F32, -1}).describe(), "barrier #5");
  EXPECT_EQ((OpRecord{"send", 0, 3, DType::F16, 2}).describe(),
            "send to rank 2 (3 float16 elements)");
  EXPECT_EQ((OpRecord{"recv", 0, 3, DType::F16, 1}).describe(),
            "recv from rank 1 (3 float16 elements)");
}

TEST(CollectiveLog, CollectivesCountFromOnePointToPointIsZero) {
  CollectiveLog log(nullptr, 0, 1);
  OpRecord a = log.begin("all_reduce", 10, DType::F32);
  EXPECT_EQ(a.seq, 1u);
  EXPECT_EQ(a.op, "all_reduce");
  EXPECT_EQ(a.numel, 10);
  EXPECT_EQ(a.peer, -1);  // a collective has no peer
  OpRecord s = log.point_to_point("send", 4, DType::F64, 3);
  EXPECT_EQ(s.seq, 0u);  // send/recv are not collectives: they do not advance the count
  EXPECT_EQ(s.peer, 3);
  EXPECT_EQ(log.begin("broadcast", 1, DType::I64).seq, 2u);
  EXPECT_EQ(log.begin("barrier", 0, DType::F32).seq, 3u);
}

TEST(CollectiveLog, WithoutStoreTheMessageNamesOnlyThisRank) {
  CollectiveLog log(nullptr, 0, 1);
  OpRecord r = log.begin("all_reduce", 8, DType::F32);
  EXPECT_EQ(log.timeout_message(r, 5000ms),
            "all_reduce #1 (8 float32 elements) timed out after 5.0 s on rank 0");
}

TEST(CollectiveLog, PublishesTheLatestRecordUnderProgressRank) {
  auto store = serve();
  CollectiveLog log(store, 1, 3);
  log.begin("all_reduce", 4096, DType::F32);
  EXPECT_EQ(wait_for(*store, "progress/1", "1 all_reduce 4096 float32"),
            "1 all_reduce 4096 float32");
  log.begin("all_reduce", 4096, DType::F32);
  log.begin("broadcast", 7, DType::I64);
  EXPECT_EQ(wait_for(*store, "progress/1", "3 broadcast 7 int64"), "3 broadcast 7 int64");
  log.point_to_point("send", 2, DType::F32, 0);  // not published: the record stays at #3
  std::this_thread::sleep_for(150ms);
  EXPECT_EQ(store->get_string("progress/1", 1s), "3 broadcast 7 int64");
  EXPECT_FALSE(store->check({"progress/0"}));  // only this rank's key
}

TEST(CollectiveLog, TimeoutNamesTheOneRankBehind) {
  auto store = serve();
  CollectiveLog log(store, 0, 3);
  OpRecord r;
  for (int i = 0; i < 17; ++i) r = log.begin("all_reduce", 4096, DType::F32);
  store->set("progress/1", std::string("16 all_reduce 4096 float32"));
  store->set("progress/2", std::string("17 all_reduce 4096 float32"));
  EXPECT_EQ(log.timeout_message(r, 5000ms),
            "all_reduce #17 (4096 float32 elements) timed out after 5.0 s on rank 0: rank 1 has "
            "not reached it (its last collective: all_reduce #16)");
  // This rank's own record is its latest collective.
  EXPECT_EQ(store->get_string("progress/0", 1s), "17 all_reduce 4096 float32");
}

TEST(CollectiveLog, TimeoutNamesEveryRankBehindAndOnesWithNoRecord) {
  auto store = serve();
  CollectiveLog log(store, 1, 4);
  OpRecord r;
  for (int i = 0; i < 5; ++i) r = log.begin("broadcast", 2, DType::I64);
  store->set("progress/0", std::string("3 all_reduce 100 float32"));
  store->set("progress/3", std::string("6 barrier 0 float32"));  // ahead of this rank: not named
  EXPECT_EQ(log.timeout_message(r, 1500ms),
            "broadcast #5 (2 int64 elements) timed out after 1.5 s on rank 1: ranks 0, 2 have not "
            "reached it (rank 0: its last collective: all_reduce #3; rank 2: no collective yet)");
}

TEST(CollectiveLog, TimeoutWhenEveryRankArrivedSaysSo) {
  auto store = serve();
  CollectiveLog log(store, 0, 2);
  OpRecord r = log.begin("all_reduce", 1, DType::F32);
  store->set("progress/1", std::string("1 all_reduce 1 float32"));
  EXPECT_EQ(log.timeout_message(r, 2500ms),
            "all_reduce #1 (1 float32 element) timed out after 2.5 s on rank 0: every rank "
            "reached it (a peer failed, or the ranks called different collectives)");
}

TEST(CollectiveLog, PointToPointTimeoutDoesNotAskTheStore) {
  auto store = serve();
  CollectiveLog log(store, 0, 2);
  OpRecord r = log.point_to_point("recv", 6, DType::F32, 1);
  EXPECT_EQ(log.timeout_message(r, 2000ms),
            "recv from rank 1 (6 float32 elements) timed out after 2.0 s on rank 0");
  EXPECT_FALSE(store->check({"progress/0"}));
}

// Note [Who left]: a rank whose count stops is named after kHeartbeatStale of watching; time in
// which this rank did not look (here a sleep, as a paused VM would be: the watched rank could not
// beat either) does not count.
TEST(CollectiveLog, AStoppedHeartbeatIsNamedAfterThreeWatchedSecondsNotAfterAStall) {
  auto store = serve();
  CollectiveLog log(store, 0, 2);
  store->add("alive/1", 5);  // rank 1 beat five times, then stopped
  EXPECT_EQ(log.departures(0ms), "");
  std::this_thread::sleep_for(3500ms);  // this rank stalled: nobody watched
  EXPECT_EQ(log.departures(0ms), "") << "the stall was taken for three quiet seconds";
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = log.departures(6000ms);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(msg.find("rank 1 has left the job (its heartbeat stopped: rank 0 saw none for "), 0u)
      << msg;
  EXPECT_GT(took, 2.4);
  EXPECT_LT(took, 4.5);
}

// Note [Who left]: the first survivor to see a heartbeat stop records "gone/<rank>"; a second
// survivor that has never watched that rank names it from the record in its first look (a wait of
// 0 ms: one pass over the ranks, no heartbeat of its own old enough), with the first one's words.
// Only the first survivor's three watched seconds take time, and nothing is asserted about them.
TEST(CollectiveLog, ARankNamedGoneByOneSurvivorIsNamedAtOnceByAnother) {
  auto store = serve();
  store->add("alive/2", 4);  // rank 2 of 3 beat four times, then stopped
  {
    CollectiveLog first(store, 0, 3);  // rank 1 has not joined yet: never beat, never named
    EXPECT_EQ(first.departures(0ms), "");
    const std::string msg = first.departures(15s);
    EXPECT_EQ(msg.find("rank 2 has left the job (its heartbeat stopped: rank 0 saw none for "), 0u)
        << msg;
  }
  ASSERT_TRUE(store->check({"gone/2"})) << "the departure was not recorded for the others";
  EXPECT_EQ(store->get_string("gone/2", 1s).find("its heartbeat stopped: rank 0 saw none for "),
            0u);
  store->set("progress/2", std::string("9 all_reduce 16 float32"));
  CollectiveLog second(store, 1, 3);
  const std::string msg = second.departures(0ms);
  EXPECT_EQ(msg.find("rank 2 has left the job (its heartbeat stopped: rank 0 saw none for "), 0u)
      << msg;
  EXPECT_NE(msg.find("; last seen in all_reduce #9; killed, or its host is gone)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("rank 0"), msg.find("rank 0 saw")) << "rank 0 is alive: " << msg;
  // A store wait on rank 2's key fails at once too, naming it.
  try {
    second.wait_for_keys(*store, {"layout/2"}, {2}, 30s, "comparing layouts");
    FAIL() << "the wait did not name rank 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("comparing layouts on rank 1 (waiting for rank 2's "
                                         "'layout/2'): rank 2 has left the job (its heartbeat "
                                         "stopped: rank 0 saw none for "),
              std::string::npos)
        << e.what();
  }
}
