// The Gloo process group in real processes: every collective against a reference (dist_tool.cpp),
// for 2, 3 and 4 processes, with rank 0 serving the store or an external one; the timeout error;
// a world of one without a store; ranks that never join, leave or are killed, named; a normal end
// silent.
#include <gtest/gtest.h>
#include <signal.h>

#include <iostream>

#include "distributed/spawn.h"
#include "distributed/store/tcp_store.h"
#include "distributed/world.h"
#ifdef LOOM_WITH_GLOO
#include "distributed/process_group/gloo_process_group.h"
#endif

using namespace loom;
using namespace loom::distributed;

namespace {
void expect_all_ok(const test::WorkerRun& run) {
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r)
    EXPECT_EQ(run.exit_codes[r], 0) << "rank " << r << "\n" << run.summary();
}

#ifdef LOOM_WITH_GLOO
class GlooCollectives : public ::testing::TestWithParam<int> {};

TEST_P(GlooCollectives, EveryOpMatchesTheReference) {
  int n = GetParam();
  auto run = test::run_workers(LOOM_DIST_TOOL, {"collectives"}, n, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 240);
  expect_all_ok(run);
}
INSTANTIATE_TEST_SUITE_P(Processes, GlooCollectives, ::testing::Values(2, 3, 4));

// A rank that never starts is named when the rendezvous gives up (here after 1.5 s).
TEST(Gloo, ARankThatNeverJoinsIsNamedWhenTheRendezvousGivesUp) {
  TCPStoreServer server("127.0.0.1", 0);
  TCPStoreOptions so;
  so.timeout = Millis(1500);
  auto store = std::make_shared<PrefixStore>(
      "world", std::make_shared<TCPStore>("127.0.0.1", server.port(), so));
  try {
    GlooProcessGroup pg(0, 3, store, Millis(1500), "127.0.0.1");
    FAIL() << "expected the rendezvous to fail";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gloo: rank 0 of 3 could not connect to the others (this rank at "
                       "127.0.0.1): ranks 1 and 2 never joined the group ["),
              std::string::npos)
        << msg;
  }
}

TEST(Gloo, ExternalStoreFromTheLauncher) {
  // The launcher's way: it serves the store, the ranks only connect (LOOM_STORE_EXTERNAL=1).
  TCPStoreServer server("127.0.0.1", 0);
  auto run = test::run_workers(LOOM_DIST_TOOL, {"collectives"}, 2, server.port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}, {"LOOM_STORE_EXTERNAL", "1"}}, 240);
  expect_all_ok(run);
}

TEST(Gloo, ARankThatStopsIsNamedInTheTimeoutError) {
  TCPStoreServer server("127.0.0.1", 0);
  auto run = test::run_workers(LOOM_DIST_TOOL, {"timeout"}, 3, server.port(),
                               {{"LOOM_TEST_BACKEND", "gloo"},
                                {"LOOM_STORE_EXTERNAL", "1"},
                                {"LOOM_TEST_TIMEOUT_MS", "2000"}},
                               60);
  expect_all_ok(run);
  EXPECT_NE(run.output[0].find("rank 2 has not reached it"), std::string::npos) << run.summary();
}

// Note [Who left]: a rank that leaves (destroy_process_group, or exit with the group up) is named
// by the others' next collective within seconds, with its last collective.
//
// dist_tool's "leave" mode on 3 Gloo ranks (an external store): rank 2 leaves `how` while the
// others are `in` a collective or a store barrier, and each of them expects `expect` in its error;
// the two survivors must exit 0, rank 2 with `last_exit`.
test::WorkerRun run_leave(const std::string& how, const std::string& in, const std::string& expect,
                          int last_exit) {
  TCPStoreServer server("127.0.0.1", 0);
  auto run = test::run_workers(LOOM_DIST_TOOL, {"leave"}, 3, server.port(),
                               {{"LOOM_TEST_BACKEND", "gloo"},
                                {"LOOM_STORE_EXTERNAL", "1"},
                                {"LEAVE", how},
                                {"LEAVE_IN", in},
                                {"LEAVE_EXPECT", expect}},
                               60);
  EXPECT_FALSE(run.timed_out) << run.summary();
  EXPECT_EQ(run.exit_codes[0], 0) << run.summary();
  EXPECT_EQ(run.exit_codes[1], 0) << run.summary();
  EXPECT_EQ(run.exit_codes[2], last_exit) << run.summary();
  return run;
}

TEST(Gloo, ARankThatCallsDestroyProcessGroupIsNamedByTheOthers) {
  run_leave("destroy", "all_reduce", "called destroy_process_group after its all_reduce #2)", 0);
}

TEST(Gloo, ARankThatExitsWithTheGroupUpIsNamedByTheOthers) {
  run_leave("exit", "all_reduce", "exited without destroy_process_group after its all_reduce #2)",
            5);
}

// A rank killed with SIGKILL, without loomrun, leaves no record: its stopped heartbeat names it
// within 5 s of its death (dist_tool measures from the time it wrote just before dying), whether
// the others wait on it in a collective or in a barrier through the store.
void expect_killed_rank_named(const std::string& in) {
  auto run = run_leave("kill", in, "its heartbeat stopped: rank ", -SIGKILL);
  for (int r = 0; r < 2; ++r) {
    const std::string& out = run.output[size_t(r)];
    EXPECT_NE(out.find("last seen in all_reduce #2; killed, or its host is gone)"),
              std::string::npos)
        << run.summary();
    const size_t at = out.find(": named ");  // the measured time, for the log
    if (at != std::string::npos)
      std::cout << "rank " << r << out.substr(at, out.find('\n', at) - at) << "\n";
  }
}

TEST(Gloo, ARankKilledMidCollectiveIsNamedByItsHeartbeat) {
  expect_killed_rank_named("all_reduce");
}

TEST(Gloo, ARankKilledDuringAStoreBarrierIsNamedByItsHeartbeat) {
  expect_killed_rank_named("store");
}

TEST(Gloo, ARankThatExitsDuringAStoreBarrierIsNamedAtOnce) {
  run_leave("exit", "store", "exited without destroy_process_group after its all_reduce #2)", 5);
}

// A normal end (a slow rank in a store barrier, then every rank calling destroy_process_group at
// its own time) names nobody, and leaves no thread behind (dist_tool's "finish").
TEST(Gloo, ANormalEndSaysNothingAboutDepartures) {
  auto run = test::run_workers(LOOM_DIST_TOOL, {"finish"}, 3, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}}, 60);
  expect_all_ok(run);
  for (const std::string& out : run.output) {
    EXPECT_EQ(out.find("left the job"), std::string::npos) << run.summary();
    EXPECT_EQ(out.find("heartbeat"), std::string::npos) << run.summary();
    EXPECT_NE(out.find("threads before and after"), std::string::npos) << run.summary();
  }
}

TEST(Gloo, ADeadPeerFailsTheOthersAtOnce) {
  TCPStoreServer server("127.0.0.1", 0);
  auto run = test::run_workers(LOOM_DIST_TOOL, {"peer_exit"}, 3, server.port(),
                               {{"LOOM_TEST_BACKEND", "gloo"}, {"LOOM_STORE_EXTERNAL", "1"}}, 60);
  EXPECT_FALSE(run.timed_out) << run.summary();
  EXPECT_EQ(run.exit_codes[0], 0) << run.summary();
  EXPECT_EQ(run.exit_codes[1], 0) << run.summary();
  EXPECT_EQ(run.exit_codes[2], 3) << run.summary();
}
#endif

TEST(ProcessGroup, AWorldOfOneNeedsNoStore) {
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("SLURM_PROCID");
  InitOptions o;
  o.backend = "gloo";
  auto pg = init_process_group(o);
  EXPECT_EQ(pg->size(), 1);
  EXPECT_EQ(pg->backend(), "local");
  Tensor t = from_vector<float>({1, 2, 3}, {3});
  pg->all_reduce(t, ReduceOp::Avg)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor out = from_vector<float>({0, 0, 0}, {3});
  pg->all_gather(out, t)->wait();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor i = from_vector<int64_t>({1}, {1});
  EXPECT_THROW(pg->all_reduce(i, ReduceOp::Avg), Error);
  EXPECT_THROW(pg->send(t, 1), Error);
  EXPECT_EQ(new_group({0})->size(), 1);
  EXPECT_THROW(new_group({0, 1}), Error);
  destroy_process_group();
  EXPECT_FALSE(is_initialized());
}
}  // namespace
