// loomrun running real collectives: dist_tool's "collectives" check (every op against a reference,
// Gloo on the CPU) as 3 workers on one node, and as 2 + 2 workers on two nodes (two loomruns on
// loopback). Skipped when loom was built without Gloo (the GPU machine has none).
#include <gtest/gtest.h>

#include "distributed/launcher/options.h"
#include "launcher_test_util.h"

using namespace loom::launcher_test;
using loom::distributed::launcher::pick_free_port;

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
  std::string master = std::to_string(pick_free_port());
  std::string rdzv = std::to_string(pick_free_port());
  auto node = [&](int rank) {
    return std::vector<std::string>{"--nnodes", "2", "--node_rank", std::to_string(rank),
                                    "--nproc_per_node", "2", "--master_port", master,
                                    "--rdzv_port", rdzv, kDistTool, "collectives"};
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
