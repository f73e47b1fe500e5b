// Where a process learns its place in the job: rank, local rank, world size, node, and the
// store's address, from torchrun/loomrun's variables, else mpirun's (Open MPI, MPICH, Intel MPI),
// else Slurm's, else a world of one.
// Leaves out: launching (loomrun), the store itself (tcp_store.h), and MPI as a transport (loom
// reads mpirun's variables only; it never calls MPI_Init).
#pragma once

#include <string>

namespace loom::distributed {

// Note [Finding the job]
// 1. RANK or WORLD_SIZE set (loomrun, torchrun, a Kubernetes PyTorchJob, or by hand): both must
//    be, and they are used, with LOCAL_RANK (default: RANK), LOCAL_WORLD_SIZE (default:
//    WORLD_SIZE), GROUP_RANK (the node, default 0), MASTER_ADDR (default 127.0.0.1),
//    MASTER_PORT (default 29500). Nothing below is read then.
// 2. Else mpirun's variables (Note [mpirun's variables]): Open MPI's OMPI_COMM_WORLD_RANK and
//    OMPI_COMM_WORLD_SIZE, else MPICH's and Intel MPI's PMI_RANK and PMI_SIZE, unless Slurm's
//    (3) are also set with the same rank and size: then the process was started by srun (whose
//    PMI plugin sets PMI_RANK = SLURM_PROCID) and Slurm's are used, which also name the master.
// 3. Else SLURM_PROCID and SLURM_NTASKS set (srun): rank = SLURM_PROCID, local rank =
//    SLURM_LOCALID, world = SLURM_NTASKS, node = SLURM_NODEID, local world = SLURM_NTASKS_PER_NODE
//    or this node's entry of SLURM_TASKS_PER_NODE ("2(x3),1"), master = MASTER_ADDR or the first
//    host of SLURM_STEP_NODELIST / SLURM_JOB_NODELIST ("gpu[003-006]" -> gpu003), port =
//    MASTER_PORT or 15000 + SLURM_JOB_ID % 20000 (the same on every node of a job).
// 4. Else a world of one (rank 0, size 1): the same program runs without a launcher.
// MPI comes before Slurm because mpirun inside a Slurm allocation (an sbatch script that calls
// mpirun) leaves the allocation's SLURM_PROCID and SLURM_NTASKS in every process it starts, and
// they describe the batch step or mpirun's daemons, not the ranks.
// A value that is not an integer, or that contradicts another (RANK >= WORLD_SIZE, LOCAL_RANK >=
// LOCAL_WORLD_SIZE, ...), is an error naming the variable and its value.

// Note [mpirun's variables]
// rank, world size: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (Open MPI), else PMI_RANK,
// PMI_SIZE (MPICH's Hydra, Intel MPI). Local rank: OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID
// or PMI_LOCAL_RANK (default: the rank); local world: OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS or PMI_LOCAL_SIZE (default: the world). mpirun names no store, so
// MASTER_ADDR and MASTER_PORT are required when the job has more than one rank (exported on
// every node, or passed as mpirun -x MASTER_ADDR -x MASTER_PORT with Open MPI, -genv with
// MPICH); the error says so. One exception: when the local world is known and equals the world
// (every rank on this machine), MASTER_ADDR defaults to 127.0.0.1 and MASTER_PORT to 29500.
// The node (group_rank) is rank / local world, right for mpirun's default placement (ranks
// fill a node before the next, --map-by slot or core); loom itself reads only rank, local rank
// and world size.
struct JobEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // the node's index
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "env" (torchrun names), "mpi", "slurm", or "none" (one)
  bool external_store = false;  // LOOM_STORE_EXTERNAL=1: the launcher serves the store
};

JobEnv job_env();

// Pieces, exposed for tests.
std::string slurm_first_host(const std::string& nodelist);             // "a[01-03],b" -> "a01"
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);  // "2(x3),1", 3 -> 1

}  // namespace loom::distributed
