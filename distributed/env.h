// Where a process learns its place in the job: rank, local rank, world size, node, and the
// store's address, from torchrun/loomrun's variables, else from Slurm's, else a world of one.
// Leaves out: launching (loomrun) and the store itself (tcp_store.h).
#pragma once

#include <string>

namespace loom::distributed {

// Note [Finding the job]
// 1. RANK and WORLD_SIZE set (loomrun, torchrun, or by hand): they are used, with LOCAL_RANK
//    (default: RANK), LOCAL_WORLD_SIZE (default: WORLD_SIZE), GROUP_RANK (the node, default 0),
//    MASTER_ADDR (default 127.0.0.1), MASTER_PORT (default 29500).
// 2. Else SLURM_PROCID and SLURM_NTASKS set (srun): rank = SLURM_PROCID, local rank =
//    SLURM_LOCALID, world = SLURM_NTASKS, node = SLURM_NODEID, local world = SLURM_NTASKS_PER_NODE
//    or this node's entry of SLURM_TASKS_PER_NODE ("2(x3),1"), master = MASTER_ADDR or the first
//    host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST ("gpu[003-006]" -> gpu003), port =
//    MASTER_PORT or 15000 + SLURM_JOB_ID % 20000 (the same on every node of a job).
// 3. Else a world of one (rank 0, size 1): the same program runs without a launcher.
// A value that is not an integer, or that contradicts another (RANK >= WORLD_SIZE, LOCAL_RANK >=
// LOCAL_WORLD_SIZE, ...), is an error naming the variable and its value.
struct JobEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // the node's index
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "env" (torchrun names), "slurm", or "none" (world of one)
  bool external_store = false;  // LOOM_STORE_EXTERNAL=1: the launcher serves the store
};

JobEnv job_env();

// Pieces, exposed for tests.
std::string slurm_first_host(const std::string& nodelist);             // "a[01-03],b" -> "a01"
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);  // "2(x3),1", 3 -> 1

}  // namespace loom::distributed
