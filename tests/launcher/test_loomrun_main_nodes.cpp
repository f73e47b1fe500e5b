// Two "nodes" on this machine: two loomrun processes with --nnodes 2 on loopback. Ranks and world
// size across nodes (also with different nproc per node), a failure on one node stopping the
// other (timed), a restart of both nodes, and node 0's loomrun dying.
#include <gtest/gtest.h>

#include "distributed/launcher/options.h"
#include "launcher_test_util.h"

using namespace loom::launcher_test;
using loom::distributed::launcher::pick_free_ports;

namespace {

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// The flags of node `rank` of a two-node job on free ports.
struct TwoNodes {
  std::vector<int> ports = pick_free_ports(2);
  std::string master = std::to_string(ports[0]);
  std::string rdzv = std::to_string(ports[1]);
  std::vector<std::string> node(int rank, int nproc, std::vector<std::string> rest,
                                std::vector<std::string> more = {}) const {
    std::vector<std::string> a{"--nnodes",         "2",
                               "--node_rank",      std::to_string(rank),
                               "--nproc_per_node", std::to_string(nproc),
                               "--master_port",    master,
                               "--rdzv_port",      rdzv,
                               "--rdzv_timeout",   "30"};
    a.insert(a.end(), more.begin(), more.end());
    a.insert(a.end(), rest.begin(), rest.end());
    return a;
  }
};

}  // namespace

TEST(LoomrunNodes, RanksAcrossTwoNodes) {
  TempDir dir;
  TwoNodes job;
  // Node 1 starts first: it waits for node 0's store.
  Loomrun n1(job.node(1, 3, {kWorker, "env", dir.str()}), dir.str(), {}, "node1");
  Loomrun n0(job.node(0, 1, {kWorker, "env", dir.str()}), dir.str(), {}, "node0");
  ASSERT_EQ(n0.run_to_end(60), 0) << n0.err();
  ASSERT_EQ(n1.run_to_end(60), 0) << n1.err();
  // Node 0 runs rank 0; node 1 ranks 1..3: world size 4 = 1 + 3.
  for (int r = 0; r < 4; ++r) {
    std::string e = read_file(dir / ("env_" + std::to_string(r)));
    ASSERT_FALSE(e.empty()) << "rank " << r;
    EXPECT_EQ(env_value(e, "WORLD_SIZE"), "4");
    EXPECT_EQ(env_value(e, "GROUP_RANK"), r == 0 ? "0" : "1");
    EXPECT_EQ(env_value(e, "LOCAL_RANK"), std::to_string(r == 0 ? 0 : r - 1));
    EXPECT_EQ(env_value(e, "LOCAL_WORLD_SIZE"), r == 0 ? "1" : "3");
    EXPECT_EQ(env_value(e, "GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(env_value(e, "MASTER_PORT"), job.master);
  }
  EXPECT_TRUE(contains(n1.out(), "[rank 3] hello from rank 3")) << n1.out();
}

// A worker of node 1 exits 3: node 1 stops its other worker, and node 0 stops both of its own
// and exits non-zero naming node 1 and rank 3, within 5 s.
TEST(LoomrunNodes, FailureOnOneNodeStopsTheOther) {
  TempDir dir;
  TwoNodes job;
  Loomrun n0(job.node(0, 2, {kWorker, "fail", dir.str(), "3", "3"}), dir.str(), {}, "node0");
  Loomrun n1(job.node(1, 2, {kWorker, "fail", dir.str(), "3", "3"}), dir.str(), {}, "node1");
  auto pids = worker_pids(dir, {0, 1, 2});
  ASSERT_EQ(pids.size(), 3u) << n0.err() << n1.err();
  auto t0 = Clock::now();
  int c1 = n1.run_to_end(15);
  int c0 = n0.run_to_end(15);
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(c1, 1) << n1.err();
  EXPECT_EQ(c0, 1) << n0.err();
  EXPECT_LT(seconds, 5.0);
  for (pid_t p : pids) EXPECT_TRUE(process_gone(p));
  EXPECT_TRUE(contains(n1.err(), "node 1: rank 3 (local rank 1, pid ")) << n1.err();
  EXPECT_TRUE(contains(n0.err(), "job failed elsewhere: node 1: rank 3 (local rank 1, pid "))
      << n0.err();
  EXPECT_TRUE(contains(n0.err(), "exit code 3; last stderr line: worker 3: deliberate exit 3"))
      << n0.err();
  for (int r : {0, 1}) EXPECT_TRUE(exists(dir / ("got_TERM_" + std::to_string(r))));
  std::printf("two nodes: both loomruns exited %.3f s after the failure\n", seconds);
}

TEST(LoomrunNodes, FailureOnNodeZeroStopsNodeOne) {
  TempDir dir;
  TwoNodes job;
  Loomrun n0(job.node(0, 1, {kWorker, "fail", dir.str(), "0", "4"}), dir.str(), {}, "node0");
  Loomrun n1(job.node(1, 1, {kWorker, "fail", dir.str(), "0", "4"}), dir.str(), {}, "node1");
  EXPECT_EQ(n0.run_to_end(20), 1) << n0.err();
  EXPECT_EQ(n1.run_to_end(20), 1) << n1.err();
  EXPECT_TRUE(contains(n1.err(), "job failed elsewhere: node 0: rank 0")) << n1.err();
  EXPECT_TRUE(exists(dir / "got_TERM_1"));
}

TEST(LoomrunNodes, RestartTakesBothNodesToTheNextAttempt) {
  TempDir dir;
  TwoNodes job;
  std::vector<std::string> w{"--max_restarts", "1", kWorker, "fail-once", dir.str(), "2", "5"};
  Loomrun n0(job.node(0, 2, w), dir.str(), {}, "node0");
  Loomrun n1(job.node(1, 2, w), dir.str(), {}, "node1");
  EXPECT_EQ(n0.run_to_end(60), 0) << n0.err();
  EXPECT_EQ(n1.run_to_end(60), 0) << n1.err();
  for (int r = 0; r < 4; ++r)
    EXPECT_TRUE(exists(dir / ("ok_" + std::to_string(r) + "_attempt_1"))) << "rank " << r;
  EXPECT_TRUE(contains(n0.err(), "restarting all workers (restart 1 of 1)")) << n0.err();
}

// kill -9 of node 0's loomrun: its workers die with it (PR_SET_PDEATHSIG); node 1 loses the
// store, stops its workers and exits non-zero.
TEST(LoomrunNodes, NodeZeroLoomrunKilled) {
  TempDir dir;
  TwoNodes job;
  Loomrun n0(job.node(0, 1, {kWorker, "sleep", dir.str()}), dir.str(), {}, "node0");
  Loomrun n1(job.node(1, 1, {kWorker, "sleep", dir.str()}), dir.str(), {}, "node1");
  auto pids = worker_pids(dir, {0, 1});
  ASSERT_EQ(pids.size(), 2u) << n0.err() << n1.err();
  auto t0 = Clock::now();
  ::kill(n0.pid(), SIGKILL);
  n0.wait(5);
  EXPECT_EQ(n1.run_to_end(10), 1) << n1.err();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_TRUE(wait_for([&] { return process_gone(pids[0]); }, 2)) << "node 0's worker survived";
  EXPECT_TRUE(process_gone(pids[1]));
  EXPECT_TRUE(contains(n1.err(), "lost the store on node 0")) << n1.err();
}

// kill -9 of node 1's loomrun: its worker dies with it; node 0 sees node 1's heartbeat stop
// (--node_timeout 2), stops its own workers and exits non-zero naming node 1.
TEST(LoomrunNodes, NodeOneLoomrunKilled) {
  TempDir dir;
  TwoNodes job;
  std::vector<std::string> fast{"--node_timeout", "2"};
  Loomrun n0(job.node(0, 1, {kWorker, "sleep", dir.str()}, fast), dir.str(), {}, "node0");
  Loomrun n1(job.node(1, 1, {kWorker, "sleep", dir.str()}, fast), dir.str(), {}, "node1");
  auto pids = worker_pids(dir, {0, 1});
  ASSERT_EQ(pids.size(), 2u) << n0.err() << n1.err();
  auto t0 = Clock::now();
  ::kill(n1.pid(), SIGKILL);
  n1.wait(5);
  EXPECT_EQ(n0.run_to_end(15), 1) << n0.err();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(seconds, 1.5);  // the heartbeat timeout...
  EXPECT_LT(seconds, 6.0);  // ...plus at most a beat and the stop
  EXPECT_TRUE(wait_for([&] { return process_gone(pids[1]); }, 2)) << "node 1's worker survived";
  EXPECT_TRUE(process_gone(pids[0]));
  EXPECT_TRUE(contains(n0.err(), "node 1 stopped answering (no heartbeat for 2 s")) << n0.err();
  std::printf("node 1's loomrun killed: node 0 stopped after %.3f s\n", seconds);
}

TEST(LoomrunNodes, NodesMustAgreeOnMaxRestarts) {
  TempDir dir;
  TwoNodes job;
  Loomrun n0(job.node(0, 1, {kWorker, "env", dir.str()}, {"--max_restarts", "0"}), dir.str(), {},
             "node0");
  Loomrun n1(job.node(1, 1, {kWorker, "env", dir.str()}, {"--max_restarts", "2"}), dir.str(), {},
             "node1");
  EXPECT_EQ(n0.run_to_end(30), 1);
  EXPECT_EQ(n1.run_to_end(30), 1);
  EXPECT_TRUE(contains(n1.err(), "--max_restarts differs between nodes: node 1 has 2, node 0"))
      << n1.err();
  EXPECT_FALSE(exists(dir / "env_0")) << "no worker may start";
}
