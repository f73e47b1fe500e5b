// Reading the job's place from the environment (Note [Finding the job] in env.h): torchrun's
// variables, mpirun's, Slurm's. Leaves out: launching, and talking to MPI or Slurm themselves.
#include "distributed/env.h"

#include <cctype>
#include <cstdlib>
#include <initializer_list>

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

namespace {
// The variable names a source's values came from, for the consistency errors.
struct Names {
  const char *rank, *world, *local_rank, *local_world;
};

const char* first_set(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (var(n)) return n;
  return nullptr;
}

Names from_torchrun(JobEnv& e) {
  LOOM_CHECK(var("RANK") && var("WORLD_SIZE"), "distributed: ", var("RANK") ? "RANK" : "WORLD_SIZE",
             " is set but ", var("RANK") ? "WORLD_SIZE" : "RANK", " is not");
  e.source = "env";
  e.rank = int_var("RANK", 0);
  e.world_size = int_var("WORLD_SIZE", 1, 1);
  e.local_rank = int_var("LOCAL_RANK", e.rank);
  e.local_world_size = int_var("LOCAL_WORLD_SIZE", e.world_size, 1);
  e.group_rank = int_var("GROUP_RANK", 0);
  if (const char* a = var("MASTER_ADDR")) e.master_addr = a;
  e.master_port = int_var("MASTER_PORT", 29500, 1);
  return {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
}

Names from_slurm(JobEnv& e) {
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
  return {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
}

// mpirun's variable names (Note [mpirun's variables]), all nullptr when mpirun set none.
Names mpi_names() {
  bool ompi = var("OMPI_COMM_WORLD_RANK") || var("OMPI_COMM_WORLD_SIZE");
  const char* rank = ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
  const char* world = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
  // A lone PMI_RANK under srun is its PMI plugin's business: Slurm's variables describe the job.
  if ((!var(rank) && !var(world)) || (!ompi && !(var(rank) && var(world)) && var("SLURM_PROCID")))
    return {nullptr, nullptr, nullptr, nullptr};
  LOOM_CHECK(var(rank) && var(world), "distributed: ", var(rank) ? rank : world, " is set but ",
             var(rank) ? world : rank, " is not");
  const char* lr =
      ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : first_set({"MPI_LOCALRANKID", "PMI_LOCAL_RANK"});
  const char* lw =
      ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : first_set({"MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"});
  return {rank, world, lr ? lr : "MPI_LOCALRANKID", lw ? lw : "MPI_LOCALNRANKS"};
}

// srun's PMI plugins set PMI_RANK = SLURM_PROCID: such a process is Slurm's.
bool slurm_started_it(const Names& mpi) {
  if (!var("SLURM_PROCID") || !var("SLURM_NTASKS")) return false;
  return int_var(mpi.rank, 0) == int_var("SLURM_PROCID", 0) &&
         int_var(mpi.world, 1, 1) == int_var("SLURM_NTASKS", 1, 1);
}

void mpi_master(JobEnv& e, const Names& n) {
  bool one_node = var(n.local_world) && e.local_world_size == e.world_size;
  bool needed = e.world_size > 1 && !one_node;
  for (const char* m : {"MASTER_ADDR", "MASTER_PORT"})
    LOOM_CHECK(!needed || var(m), "distributed: started by mpirun (", n.rank, "=", e.rank, ", ",
               n.world, "=", e.world_size, ") but ", m,
               " is not set: mpirun names no store, so export MASTER_ADDR=<rank 0's host> and "
               "MASTER_PORT=<a free port> on every node, or pass them with mpirun -x MASTER_ADDR "
               "-x MASTER_PORT (Open MPI) or -genv (MPICH, Intel MPI); on one machine (",
               n.local_world, " equal to ", n.world, ") they default to 127.0.0.1:29500");
  if (const char* a = var("MASTER_ADDR")) e.master_addr = a;
  e.master_port = int_var("MASTER_PORT", 29500, 1);
}

void check_consistent(const JobEnv& e, const Names& n) {
  LOOM_CHECK(e.rank < e.world_size, "distributed: ", n.rank, "=", e.rank, " is not below ", n.world,
             "=", e.world_size);
  LOOM_CHECK(e.local_world_size <= e.world_size, "distributed: ", n.local_world, "=",
             e.local_world_size, " is more than ", n.world, "=", e.world_size);
  LOOM_CHECK(e.local_rank < e.local_world_size, "distributed: ", n.local_rank, "=", e.local_rank,
             " is not below ", n.local_world, "=", e.local_world_size);
  LOOM_CHECK(e.master_port < 65536, "distributed: MASTER_PORT=", e.master_port, " is out of range");
}
Names from_mpi(JobEnv& e, const Names& n) {
  e.source = "mpi";
  e.rank = int_var(n.rank, 0);
  e.world_size = int_var(n.world, 1, 1);
  e.local_rank = int_var(n.local_rank, e.rank);
  e.local_world_size = int_var(n.local_world, e.world_size, 1);
  e.group_rank = e.rank / e.local_world_size;
  check_consistent(e, n);  // wrong values before a missing master
  mpi_master(e, n);
  return n;
}

}  // namespace

JobEnv job_env() {
  JobEnv e;
  const char* ext = var("LOOM_STORE_EXTERNAL");
  e.external_store = ext && std::string(ext) != "0";
  Names n{"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  if (var("RANK") || var("WORLD_SIZE"))
    n = from_torchrun(e);
  else if (Names mpi = mpi_names(); mpi.rank && !slurm_started_it(mpi))
    n = from_mpi(e, mpi);
  else if (var("SLURM_PROCID") && var("SLURM_NTASKS"))
    n = from_slurm(e);
  check_consistent(e, n);
  return e;
}

}  // namespace loom::distributed
