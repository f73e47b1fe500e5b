// Reading the job's place from the environment (Note [Finding the job] in env.h).
#include "distributed/env.h"

#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace loom::distributed {

namespace {
const char* var(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int int_var(const char* name, int fallback, int lo = 0) {
  const char* v = var(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  LOOM_CHECK(end && *end == '\0' && x >= lo && x <= (1 << 24), "distributed: ", name, "='", v,
             "' is not an integer >= ", lo);
  return int(x);
}
}  // namespace

std::string slurm_first_host(const std::string& nodelist) {
  size_t i = 0;
  std::string prefix;
  while (i < nodelist.size() && nodelist[i] != ',' && nodelist[i] != '[') prefix += nodelist[i++];
  if (i < nodelist.size() && nodelist[i] == '[') {
    ++i;
    std::string first;
    while (i < nodelist.size() && std::isdigit(static_cast<unsigned char>(nodelist[i])))
      first += nodelist[i++];
    LOOM_CHECK(!first.empty(), "distributed: cannot read the node list '", nodelist, "'");
    return prefix + first;
  }
  LOOM_CHECK(!prefix.empty(), "distributed: empty Slurm node list");
  return prefix;
}

int slurm_tasks_on_node(const std::string& spec, int node) {
  // Entries "N" or "N(xK)", comma-separated, in node order.
  size_t i = 0;
  int seen = 0;
  while (i < spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    int count = std::atoi(item.c_str()), repeat = 1;
    size_t x = item.find("(x");
    if (x != std::string::npos) repeat = std::atoi(item.c_str() + x + 2);
    LOOM_CHECK(count > 0 && repeat > 0, "distributed: cannot read SLURM_TASKS_PER_NODE='", spec,
               "'");
    if (node < seen + repeat) return count;
    seen += repeat;
    i = end + 1;
  }
  LOOM_FAIL("distributed: SLURM_TASKS_PER_NODE='", spec, "' has no entry for node ", node);
}

JobEnv job_env() {
  JobEnv e;
  const char* ext = var("LOOM_STORE_EXTERNAL");
  e.external_store = ext && std::string(ext) != "0";
  if (var("RANK") || var("WORLD_SIZE")) {
    LOOM_CHECK(var("RANK") && var("WORLD_SIZE"),
               "distributed: ", var("RANK") ? "RANK" : "WORLD_SIZE", " is set but ",
               var("RANK") ? "WORLD_SIZE" : "RANK", " is not");
    e.source = "env";
    e.rank = int_var("RANK", 0);
    e.world_size = int_var("WORLD_SIZE", 1, 1);
    e.local_rank = int_var("LOCAL_RANK", e.rank);
    e.local_world_size = int_var("LOCAL_WORLD_SIZE", e.world_size, 1);
    e.group_rank = int_var("GROUP_RANK", 0);
    if (const char* a = var("MASTER_ADDR")) e.master_addr = a;
    e.master_port = int_var("MASTER_PORT", 29500, 1);
  } else if (var("SLURM_PROCID") && var("SLURM_NTASKS")) {
    e.source = "slurm";
    e.rank = int_var("SLURM_PROCID", 0);
    e.world_size = int_var("SLURM_NTASKS", 1, 1);
    e.local_rank = int_var("SLURM_LOCALID", 0);
    e.group_rank = int_var("SLURM_NODEID", 0);
    if (var("SLURM_NTASKS_PER_NODE"))
      e.local_world_size = int_var("SLURM_NTASKS_PER_NODE", 1, 1);
    else if (const char* t = var("SLURM_TASKS_PER_NODE"))
      e.local_world_size = slurm_tasks_on_node(t, e.group_rank);
    else
      e.local_world_size = e.world_size;
    if (const char* a = var("MASTER_ADDR"))
      e.master_addr = a;
    else if (const char* l = var("SLURM_STEP_NODELIST"))
      e.master_addr = slurm_first_host(l);
    else if (const char* l2 = var("SLURM_JOB_NODELIST"))
      e.master_addr = slurm_first_host(l2);
    e.master_port = int_var("MASTER_PORT", 15000 + int_var("SLURM_JOB_ID", 0) % 20000, 1);
  }
  const char* rank_var = e.source == "slurm" ? "SLURM_PROCID" : "RANK";
  const char* world_var = e.source == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE";
  const char* local_var = e.source == "slurm" ? "SLURM_LOCALID" : "LOCAL_RANK";
  const char* lws_var = e.source == "slurm" ? "SLURM_NTASKS_PER_NODE" : "LOCAL_WORLD_SIZE";
  LOOM_CHECK(e.rank < e.world_size, "distributed: ", rank_var, "=", e.rank, " is not below ",
             world_var, "=", e.world_size);
  LOOM_CHECK(e.local_world_size <= e.world_size, "distributed: ", lws_var, "=", e.local_world_size,
             " is more than ", world_var, "=", e.world_size);
  LOOM_CHECK(e.local_rank < e.local_world_size, "distributed: ", local_var, "=", e.local_rank,
             " is not below ", lws_var, "=", e.local_world_size);
  LOOM_CHECK(e.master_port < 65536, "distributed: MASTER_PORT=", e.master_port, " is out of range");
  return e;
}

}  // namespace loom::distributed
