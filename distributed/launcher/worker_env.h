// The environment loomrun gives each worker: the parent's environment, torchrun's variables
// (RANK, LOCAL_RANK, WORLD_SIZE, ...) and loom's (LOOM_RESTART_COUNT), with NVLink multicast off.
// Leaves out: starting the process (worker_process.h).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace loom::distributed::launcher {

// Who one worker is in the job.
struct WorkerIdentity {
  int rank = 0;  // global rank: this node's first rank + local_rank
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // the node's rank (torchrun's GROUP_RANK)
  int nnodes = 1;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;  // the attempt: 0 first, then 1, 2, ... after restarts
  int max_restarts = 0;
  bool launcher_store = false;  // loomrun serves the store on MASTER_PORT: workers only connect
};

using Environment = std::map<std::string, std::string>;

// This process's environment (environ) as a map.
Environment current_environment();

// The worker's environment: `parent` plus the identity variables (which replace any inherited
// ones), with the NVLink multicast switches of Note [Multicast off]. `notes` receives one line per
// variable loomrun changed against the parent's wish (printed once by the caller).
Environment worker_environment(const Environment& parent, const WorkerIdentity& who,
                               std::vector<std::string>* notes = nullptr);

// "KEY=value" strings for execve.
std::vector<std::string> to_envp(const Environment& env);

}  // namespace loom::distributed::launcher
