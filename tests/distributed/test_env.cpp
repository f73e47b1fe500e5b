// distributed/env.h: torchrun's variables, mpirun's, Slurm's, a world of one, the order between
// them (Note [Finding the job]), and the errors. Every variable is set by hand and restored after.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

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
                       "LOOM_STORE_EXTERNAL",
                       "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK",
                       "OMPI_COMM_WORLD_LOCAL_SIZE",
                       "PMI_RANK",
                       "PMI_SIZE",
                       "PMI_LOCAL_RANK",
                       "PMI_LOCAL_SIZE",
                       "MPI_LOCALRANKID",
                       "MPI_LOCALNRANKS"};

// Each test starts with none of kVars set and leaves the process's values as it found them.
class Env : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* x = std::getenv(v)) saved_[v] = x;
      unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    for (const auto& [k, x] : saved_) setenv(k.c_str(), x.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

// The message of job_env()'s error, or "" when it returns.
std::string job_env_error() {
  try {
    job_env();
  } catch (const loom::Error& e) {
    return e.what();
  }
  return "";
}

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

TEST_F(Env, OpenMpi) {
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("MASTER_ADDR", "node0", 1);
  setenv("MASTER_PORT", "29600", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.source, "mpi");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.group_rank, 1);  // rank / local world (Note [mpirun's variables])
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29600);
}

TEST_F(Env, MpichAndIntelMpi) {
  setenv("PMI_RANK", "2", 1);
  setenv("PMI_SIZE", "3", 1);
  setenv("MPI_LOCALRANKID", "2", 1);
  setenv("MPI_LOCALNRANKS", "3", 1);
  JobEnv e = job_env();  // one machine: the master defaults to this one
  EXPECT_EQ(e.source, "mpi");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29500);
  unsetenv("MPI_LOCALRANKID");
  unsetenv("MPI_LOCALNRANKS");
  setenv("PMI_LOCAL_RANK", "0", 1);
  setenv("PMI_LOCAL_SIZE", "3", 1);
  e = job_env();
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 3);
}

TEST_F(Env, MpiWithoutMasterSaysWhatToSet) {
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);  // two machines
  std::string msg = job_env_error();
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_SIZE=4) but MASTER_ADDR is not set"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("mpirun -x MASTER_ADDR -x MASTER_PORT"), std::string::npos) << msg;
  setenv("MASTER_ADDR", "node0", 1);
  msg = job_env_error();
  EXPECT_NE(msg.find("but MASTER_PORT is not set"), std::string::npos) << msg;
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");  // the local world unknown: still required
  msg = job_env_error();
  EXPECT_NE(msg.find("but MASTER_PORT is not set"), std::string::npos) << msg;
  setenv("MASTER_PORT", "29501", 1);
  EXPECT_EQ(job_env().master_port, 29501);
}

TEST_F(Env, MpiErrorsNameTheVariable) {
  setenv("PMI_RANK", "3", 1);
  std::string msg = job_env_error();
  EXPECT_NE(msg.find("PMI_RANK is set but PMI_SIZE is not"), std::string::npos) << msg;
  setenv("PMI_SIZE", "3", 1);
  msg = job_env_error();
  EXPECT_NE(msg.find("PMI_RANK=3 is not below PMI_SIZE=3"), std::string::npos) << msg;
  unsetenv("PMI_RANK");
  unsetenv("PMI_SIZE");
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  msg = job_env_error();
  EXPECT_NE(msg.find("OMPI_COMM_WORLD_LOCAL_RANK=2 is not below OMPI_COMM_WORLD_LOCAL_SIZE=2"),
            std::string::npos)
      << msg;
}

// Note [Finding the job]: torchrun's names, then mpirun's, then Slurm's.
TEST_F(Env, TorchrunBeatsMpiAndSlurm) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("SLURM_PROCID", "5", 1);
  setenv("SLURM_NTASKS", "6", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.source, "env");
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.world_size, 2);
}

TEST_F(Env, MpirunInsideASlurmAllocationBeatsSlurm) {
  setenv("SLURM_PROCID", "0", 1);  // the batch step's, inherited by every rank of mpirun
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[1-2]", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "16", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 1);
  setenv("MASTER_ADDR", "gpu1", 1);
  setenv("MASTER_PORT", "29502", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.source, "mpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 16);
  EXPECT_EQ(e.local_world_size, 8);
}

TEST_F(Env, SrunWithPmiIsSlurm) {
  // srun --mpi=pmi2 sets PMI_RANK and PMI_SIZE equal to Slurm's: Slurm's names the master.
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_LOCALID", "0", 1);
  setenv("SLURM_NODEID", "1", 1);
  setenv("SLURM_NTASKS_PER_NODE", "1", 1);
  setenv("SLURM_JOB_NODELIST", "gpu[1-2]", 1);
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "2", 1);
  JobEnv e = job_env();
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.master_addr, "gpu1");
  unsetenv("PMI_SIZE");  // a lone PMI_RANK under srun: still Slurm's, no error
  EXPECT_EQ(job_env().source, "slurm");
}
}  // namespace
