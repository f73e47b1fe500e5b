// The NCCL process group in real processes, one GPU each: every collective against the reference
// (dist_tool.cpp) and the timeout error. Skipped without NCCL or with fewer than 2 GPUs.
#include <gtest/gtest.h>

#include "core/cuda/available.h"
#include "distributed/spawn.h"
#include "distributed/store/tcp_store.h"

using namespace loom;
using namespace loom::distributed;

namespace {
void need_two_gpus() {
#ifndef LOOM_WITH_NCCL
  GTEST_SKIP() << "loom was built without NCCL";
#else
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, found " << cuda::device_count();
#endif
}

TEST(Nccl, EveryOpMatchesTheReference) {
  need_two_gpus();
  if (::testing::Test::IsSkipped()) return;
  auto run = test::run_workers(LOOM_DIST_TOOL, {"collectives"}, 2, test::free_port(),
                               {{"LOOM_TEST_BACKEND", "nccl"}}, 300);
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(run.exit_codes[r], 0) << run.summary();
}

TEST(Nccl, ARankThatStopsIsNamedInTheTimeoutError) {
  need_two_gpus();
  if (::testing::Test::IsSkipped()) return;
  TCPStoreServer server("127.0.0.1", 0);
  auto run = test::run_workers(LOOM_DIST_TOOL, {"timeout"}, 2, server.port(),
                               {{"LOOM_TEST_BACKEND", "nccl"},
                                {"LOOM_STORE_EXTERNAL", "1"},
                                {"LOOM_TEST_TIMEOUT_MS", "3000"}},
                               90);
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < 2; ++r) EXPECT_EQ(run.exit_codes[r], 0) << run.summary();
  EXPECT_NE(run.output[0].find("rank 1 has not reached it"), std::string::npos) << run.summary();
  std::cout << run.output[0];
}
}  // namespace
