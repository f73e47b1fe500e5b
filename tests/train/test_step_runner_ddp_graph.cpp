// --cuda-graph under DistributedDataParallel over Gloo, on CPU processes: refused, with the
// reason, both by the step (2 Gloo workers of step_runner_ddp_tool.cpp asking StepRunner for the
// graph step) and by the training programs under loomrun (train_mlp's flags check, in
// tests/examples/test_train_mlp_ddp.cpp). Leaves out: the captured NCCL step itself, which needs
// a GPU (test_cuda_step_runner_ddp_graph.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "distributed/spawn.h"

using namespace loom;

#ifdef LOOM_WITH_GLOO
// The first graph step names the backend, the rank count and why Gloo cannot be captured, and
// points at NCCL; nothing is trained (each rank fails before its warm-up pass).
TEST(CudaGraphDDP, GlooIsRefusedWithTheReason) {
  char t[] = "/tmp/loom-ddp-graph-XXXXXX";
  std::string dir = mkdtemp(t);
  auto run = test::run_workers(LOOM_STEP_RUNNER_DDP_TOOL, {"1", "2", dir, "graph"}, 2,
                               test::free_port(), {}, 120);
  EXPECT_FALSE(run.timed_out) << run.summary();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(run.exit_codes[size_t(r)], 1) << run.summary();
    const std::string& out = run.output[size_t(r)];
    for (const char* part :
         {"--cuda-graph: DistributedDataParallel's all-reduces over the gloo backend (2 ranks) "
          "cannot be captured into a CUDA graph",
          "Gloo runs each collective on its own host threads over CPU tensors",
          "NCCL's collectives are captured: use the nccl backend"})
      EXPECT_NE(out.find(part), std::string::npos) << "rank " << r << ": " << out;
    EXPECT_FALSE(std::filesystem::exists(dir + "/final_rank" + std::to_string(r) + ".safetensors"));
  }
  std::filesystem::remove_all(dir);
}
#endif
