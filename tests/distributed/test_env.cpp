// distributed/env.h: torchrun's variables, Slurm's, a world of one, and the errors.
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "distributed/env.h"

using namespace loom::distributed;

namespace {
const char* kVars[] = {"RANK",
                       "WORLD_SIZE",
                       "LOCAL_RANK",
                       "LOCAL_WORLD_SIZE",
                       "GROUP_RANK",
                       "MASTER_ADDR",
                       "MASTER_PORT",
                       "SLURM_PROCID",
                       "SLURM_NTASKS",
                       "SLURM_LOCALID",
                       "SLURM_NODEID",
                       "SLURM_NTASKS_PER_NODE",
                       "SLURM_TASKS_PER_NODE",
                       "SLURM_STEP_NODELIST",
                       "SLURM_JOB_NODELIST",
                       "SLURM_JOB_ID",
                       "LOOM_STORE_EXTERNAL"};

class Env : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override { SetUp(); }
};

TEST_F(Env, NothingSetIsAWorldOfOne) {
  JobEnv e = job_env();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.source, "none");
}

TEST_F(Env, TorchrunNames) {
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("GROUP_RANK", "1", 1);
  setenv("MASTER_ADDR", "node7", 1);
  setenv("MASTER_PORT", "1234", 1);
  setenv("LOOM_STORE_EXTERNAL", "1", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.group_rank, 1);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 1234);
  EXPECT_TRUE(e.external_store);
}

TEST_F(Env, Slurm) {
  setenv("SLURM_PROCID", "6", 1);
  setenv("SLURM_NTASKS", "7", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NODEID", "3", 1);
  setenv("SLURM_TASKS_PER_NODE", "2(x3),1", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[003-006,9]", 1);
  setenv("SLURM_JOB_ID", "123456", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 7);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.group_rank, 3);
  EXPECT_EQ(e.master_addr, "gpu003");
  EXPECT_EQ(e.master_port, 15000 + 123456 % 20000);
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_tasks_on_node("4", 0), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2), 2);
}

TEST_F(Env, InconsistentValuesNameTheVariable) {
  setenv("RANK", "4", 1);
  setenv("WORLD_SIZE", "4", 1);
  EXPECT_THROW(
      try { job_env(); } catch (const loom::Error& e) {
        EXPECT_NE(std::string(e.what()).find("RANK=4 is not below WORLD_SIZE=4"), std::string::npos)
            << e.what();
        throw;
      },
      loom::Error);
  setenv("RANK", "x1", 1);
  EXPECT_THROW(
      try { job_env(); } catch (const loom::Error& e) {
        EXPECT_NE(std::string(e.what()).find("RANK='x1'"), std::string::npos) << e.what();
        throw;
      },
      loom::Error);
  unsetenv("WORLD_SIZE");
  setenv("RANK", "0", 1);
  EXPECT_THROW(job_env(), loom::Error);
}
}  // namespace
