// Builds each worker's environment; see worker_env.h.
#include "distributed/launcher/worker_env.h"

#include <string_view>

extern char** environ;

namespace loom::distributed::launcher {

Environment current_environment() {
  Environment env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

// Note [Multicast off]
// NVLink multicast (NVLS in NCCL, multicast objects in symmetric memory and NVSHMEM) can take a
// host's shared GPUs out of service, so every process loomrun starts runs with it off:
// NCCL_NVLS_ENABLE is always 0 (a parent's 1 is overridden, with a note), and the two switches
// that turn it off elsewhere, TORCH_SYMM_MEM_DISABLE_MULTICAST and NVSHMEM_DISABLE_NVLS, are
// kept at 1 when the parent sets them at all (a parent's 0 would enable it: overridden too).
// loomrun never adds a variable that enables multicast.
static void force(Environment& env, const std::string& key, const std::string& value,
                  std::vector<std::string>* notes) {
  auto it = env.find(key);
  if (it != env.end() && it->second != value && notes)
    notes->push_back(key + "=" + it->second + " overridden to " + value +
                     " (NVLink multicast stays off)");
  env[key] = value;
}

Environment worker_environment(const Environment& parent, const WorkerIdentity& who,
                               std::vector<std::string>* notes) {
  Environment env = parent;
  env["RANK"] = std::to_string(who.rank);
  env["LOCAL_RANK"] = std::to_string(who.local_rank);
  env["WORLD_SIZE"] = std::to_string(who.world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(who.local_world_size);
  env["GROUP_RANK"] = std::to_string(who.group_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(who.nnodes);
  env["ROLE_RANK"] = std::to_string(who.rank);  // torchrun sets these two for its one role
  env["ROLE_WORLD_SIZE"] = std::to_string(who.world_size);
  env["MASTER_ADDR"] = who.master_addr;
  env["MASTER_PORT"] = std::to_string(who.master_port);
  env["LOOM_RESTART_COUNT"] = std::to_string(who.restart_count);
  env["LOOM_MAX_RESTARTS"] = std::to_string(who.max_restarts);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(who.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(who.max_restarts);
  // Note [Who serves the store]: loom's init_process_group and PyTorch's env:// both read these.
  if (who.launcher_store) {
    env.insert_or_assign("LOOM_STORE_EXTERNAL", std::string("1"));
    env.insert_or_assign("TORCHELASTIC_USE_AGENT_STORE", std::string("True"));
  } else {
    env.erase("LOOM_STORE_EXTERNAL");
    env.erase("TORCHELASTIC_USE_AGENT_STORE");
  }
  // torchrun's default too: N workers with OpenMP each would oversubscribe the cores.
  if (who.local_world_size > 1) env.emplace("OMP_NUM_THREADS", "1");  // only when unset

  force(env, "NCCL_NVLS_ENABLE", "0", notes);  // Note [Multicast off]
  for (const char* key : {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"})
    if (env.count(key)) force(env, key, "1", notes);
  return env;
}

std::vector<std::string> to_envp(const Environment& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace loom::distributed::launcher
