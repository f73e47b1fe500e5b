// loomrun running real collectives: dist_tool's "collectives" check (every op against a reference,
// Gloo on the CPU) as 3 workers on one node, and as 2 + 2 workers on two nodes (two loomruns on
// loopback). Skipped when loom was built without Gloo (the GPU machine has none).
#include <gtest/gtest.h>

#include "distributed/launcher/options.h"
#include "launcher_test_util.h"

using namespace loom::launcher_test;
using loom::distributed::launcher::pick_free_ports;

#if defined(LOOM_WITH_GLOO) && defined(LOOM_DIST_TOOL_BIN)
static const std::string kDistTool = LOOM_DIST_TOOL_BIN;
#define SKIP_WITHOUT_GLOO()
#else
static const std::string kDistTool;
#define SKIP_WITHOUT_GLOO() GTEST_SKIP() << "loom was built without Gloo (libgloo-dev)"
#endif

TEST(LoomrunGloo, CollectivesOnThreeWorkers) {
  SKIP_WITHOUT_GLOO();
  TempDir dir;
  Loomrun run({"--standalone", "--nproc_per_node", "3", kDistTool, "collectives"}, dir.str(),
              {"LOOM_TEST_BACKEND=gloo"});
  ASSERT_EQ(run.run_to_end(240), 0) << run.out() << run.err();
  for (int r = 0; r < 3; ++r) {
    std::string ok = "[rank " + std::to_string(r) + "] rank " + std::to_string(r) + ": ok";
    EXPECT_NE(run.out().find(ok), std::string::npos) << run.out();
  }
}

TEST(LoomrunGloo, CollectivesOnTwoNodes) {
  SKIP_WITHOUT_GLOO();
  TempDir dir;
  const std::vector<int> ports = pick_free_ports(2);  // two different ports
  std::string master = std::to_string(ports[0]), rdzv = std::to_string(ports[1]);
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes",         "2",  "--node_rank",   std::to_string(rank),
                                    "--nproc_per_node", "2",  "--master_port", master,
                                    "--rdzv_port",      rdzv, kDistTool,       "collectives"};
  };
  Loomrun n1(node(1), dir.str(), {"LOOM_TEST_BACKEND=gloo"}, "node1");
  Loomrun n0(node(0), dir.str(), {"LOOM_TEST_BACKEND=gloo"}, "node0");
  EXPECT_EQ(n0.run_to_end(240), 0) << n0.out() << n0.err();
  EXPECT_EQ(n1.run_to_end(240), 0) << n1.out() << n1.err();
  for (int r = 0; r < 4; ++r) {
    std::string ok = "[rank " + std::to_string(r) + "] rank " + std::to_string(r) + ": ok";
    EXPECT_NE((r < 2 ? n0 : n1).out().find(ok), std::string::npos) << r;
  }
}

TEST(LoomrunGloo, TheStoreTokenReachesEveryWorkerAndNode) {
  // LOOM_STORE_TOKEN set for both loomruns: their node rendezvous store, the workers' store that
  // node 0 serves and every worker all use it (a worker without it would be refused).
  SKIP_WITHOUT_GLOO();
  TempDir dir;
  const std::vector<int> ports = pick_free_ports(2);  // two different ports
  std::string master = std::to_string(ports[0]), rdzv = std::to_string(ports[1]);
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes",         "2",  "--node_rank",   std::to_string(rank),
                                    "--nproc_per_node", "1",  "--master_port", master,
                                    "--rdzv_port",      rdzv, kDistTool,       "collectives"};
  };
  std::vector<std::string> env{"LOOM_TEST_BACKEND=gloo", "LOOM_STORE_TOKEN=node-token"};
  Loomrun n1(node(1), dir.str(), env, "node1");
  Loomrun n0(node(0), dir.str(), env, "node0");
  EXPECT_EQ(n0.run_to_end(240), 0) << n0.out() << n0.err();
  EXPECT_EQ(n1.run_to_end(240), 0) << n1.out() << n1.err();
  EXPECT_NE(n0.out().find("[rank 0] rank 0: ok"), std::string::npos) << n0.out();
  EXPECT_NE(n1.out().find("[rank 1] rank 1: ok"), std::string::npos) << n1.out();
}

namespace {
// The pid of loomrun's child whose environment has RANK=rank (-1 if there is none yet).
pid_t child_with_rank(pid_t parent, int rank) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file("/proc/" + name + "/stat");
    auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::string env = read_file("/proc/" + name + "/environ");
    if (env.find(std::string("RANK=") + std::to_string(rank) + '\0') == 0 ||
        env.find(std::string("\0RANK=", 6) + std::to_string(rank) + '\0') != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}
}  // namespace

// Note [Who left]: rank 2 ends with exit status 0 after two all_reduces, leaving no record of its
// own (std::_Exit); loomrun records its exit in the store, so ranks 0 and 1, whose next all_reduce
// fails, name it and how it ended (its last collective as last published: #1 or #2), and the
// job (every worker exiting 0) succeeds.
TEST(LoomrunGloo, AWorkerThatEndsEarlyIsNamedThroughTheLaunchersRecord) {
  SKIP_WITHOUT_GLOO();
  TempDir dir;
  Loomrun run({"--standalone", "--nproc_per_node", "3", kDistTool, "leave"}, dir.str(),
              {"LOOM_TEST_BACKEND=gloo", "LEAVE=vanish",
               "LEAVE_EXPECT=exit status 0; last seen in all_reduce #"});
  // Exit status 0: ranks 0 and 1 found the message they expect (dist_tool's leave mode).
  EXPECT_EQ(run.run_to_end(60), 0) << run.out() << run.err();
  EXPECT_NE(run.out().find("rank 2 has left the job (exit status 0; last seen in all_reduce #"),
            std::string::npos)
      << run.out() << run.err();
}

// Fail-fast with real collectives: ranks 0 and 1 block in all_reduce #4 (collective timeout 60 s)
// waiting for rank 2, which is killed with -9; loomrun must end the job within 5 s.
TEST(LoomrunGloo, KillNineDuringACollective) {
  SKIP_WITHOUT_GLOO();
  TempDir dir;
  Loomrun run({"--standalone", "--nproc_per_node", "3", kDistTool, "timeout"}, dir.str(),
              {"LOOM_TEST_BACKEND=gloo", "LOOM_TEST_TIMEOUT_MS=60000"});
  pid_t victim = -1;
  ASSERT_TRUE(wait_for([&] { return (victim = child_with_rank(run.pid(), 2)) > 0; }, 30))
      << run.err();
  // Rank 2 sleeps after 3 all_reduces; give the others time to reach the 4th and block in it.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  pid_t others[2] = {child_with_rank(run.pid(), 0), child_with_rank(run.pid(), 1)};
  ASSERT_GT(others[0], 0);
  ASSERT_GT(others[1], 0);
  auto t0 = Clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  EXPECT_EQ(run.run_to_end(15), 1) << run.err();
  double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(run.err().find("rank 2 (local rank 2, pid " + std::to_string(victim) +
                           ") failed: signal 9 (SIGKILL)"),
            std::string::npos)
      << run.err();
  for (pid_t p : others) EXPECT_TRUE(process_gone(p)) << "rank pid " << p << " still alive";
  std::printf("kill -9 during a Gloo all_reduce: loomrun exited %.3f s later\n", seconds);
}
