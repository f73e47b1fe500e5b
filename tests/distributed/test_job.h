// The start every distributed test worker shares (ddp_tool, zero_tool): read the job that
// run_workers (spawn.h) set up, pick the backend from LOOM_TEST_BACKEND (gloo by default; nccl
// puts the rank on cuda:LOCAL_RANK) and join the world group with a 60 s timeout.
// Leaves out: each tool's modes and its exit codes.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "distributed/env.h"
#include "distributed/world.h"

namespace loom::test {

struct TestJob {
  int rank = 0, world = 1;
  Device device;
};

inline TestJob join_test_job() {
  distributed::JobEnv env = distributed::job_env();
  const char* b = std::getenv("LOOM_TEST_BACKEND");
  const std::string backend = b ? b : "gloo";
  distributed::InitOptions io;
  io.backend = backend;
  io.timeout = std::chrono::seconds(60);
  TestJob job{env.rank, env.world_size, backend == "nccl" ? cuda_device(env.local_rank) : kCPU};
  distributed::init_process_group(io);
  return job;
}

}  // namespace loom::test
