// loomrun's pieces without processes: flag parsing (torchrun's spellings, bad values), the worker
// environment (identity variables, NVLink multicast kept off), exit-status words.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>
#include <thread>

#include "core/cuda/available.h"
#include "core/error.h"
#include "distributed/launcher/options.h"
#include "distributed/launcher/worker_env.h"
#include "distributed/launcher/worker_process.h"

using namespace loom::distributed::launcher;

static LaunchOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "loomrun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return parse_launch_options(static_cast<int>(argv.size()), argv.data());
}

TEST(LaunchOptions, TorchrunSpellings) {
  auto o =
      parse({"--nproc_per_node", "4", "--nnodes=2", "--node_rank", "1", "--master_addr", "10.0.0.1",
             "--master_port", "1234", "--max_restarts", "2", "prog", "--lr", "0.1", "x"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.rdzv_port, 1235);
  EXPECT_EQ(o.max_restarts, 2);
  // Flags after the program belong to the program.
  EXPECT_EQ(o.program, (std::vector<std::string>{"prog", "--lr", "0.1", "x"}));

  auto d = parse({"--nproc-per-node=3", "--node-rank=0", "--master-port", "4000", "--", "p", "-v"});
  EXPECT_EQ(d.nproc_per_node, 3);
  EXPECT_EQ(d.master_port, 4000);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.program, (std::vector<std::string>{"p", "-v"}));
}

TEST(LaunchOptions, Defaults) {
  auto o = parse({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.max_restarts, 0);
  EXPECT_DOUBLE_EQ(o.grace_seconds, 3.0);
}

TEST(LaunchOptions, StandalonePicksAFreePort) {
  auto o = parse({"--standalone", "--master_port", "1", "prog"});
  EXPECT_NE(o.master_port, 1);
  EXPECT_GT(o.master_port, 1023);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
}

TEST(LaunchOptions, NprocWords) {
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  EXPECT_EQ(resolve_nproc("cpu"), threads);
  EXPECT_EQ(resolve_nproc("7"), 7);
  // Without a GPU, "auto" means one per hardware thread and "gpu" is an error naming the flag.
  if (loom::cuda::device_count() == 0) {
    EXPECT_EQ(resolve_nproc("auto"), threads);
    try {
      resolve_nproc("gpu");
      FAIL() << "gpu without GPUs must throw";
    } catch (const loom::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--nproc_per_node gpu"), std::string::npos) << e.what();
    }
  }
}

TEST(LaunchOptions, BadValuesNameTheFlag) {
  auto expect_error = [](std::vector<std::string> args, const std::string& needle) {
    try {
      parse(args);
      ADD_FAILURE() << "no error for " << args[0];
    } catch (const loom::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error({"--nproc_per_node", "0", "p"}, "--nproc_per_node 0");
  expect_error({"--nproc_per_node", "two", "p"}, "'two' is not a number");
  expect_error({"--nnodes", "2", "--node_rank", "2", "p"}, "--node_rank 2 must be in [0, 2)");
  expect_error({"--master_port", "70000", "p"}, "--master_port 70000");
  expect_error({"--nnodes", "2", "--standalone", "p"}, "--standalone is one node");
  expect_error({"--nproc_per_node", "2"}, "no program to run");
  expect_error({"--max_restarts", "-1", "p"}, "--max_restarts -1");
  expect_error({"--nprocs", "2", "p"}, "unknown flag --nprocs");
}

TEST(WorkerEnvironment, IdentityAndMulticastOff) {
  Environment parent{{"PATH", "/bin"},
                     {"RANK", "99"},
                     {"NCCL_NVLS_ENABLE", "1"},
                     {"NVSHMEM_DISABLE_NVLS", "0"},
                     {"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"}};
  WorkerIdentity w;
  w.rank = 5;
  w.local_rank = 1;
  w.world_size = 8;
  w.local_world_size = 4;
  w.group_rank = 1;
  w.nnodes = 2;
  w.master_addr = "10.1.2.3";
  w.master_port = 2345;
  w.restart_count = 2;
  w.max_restarts = 3;
  std::vector<std::string> notes;
  Environment e = worker_environment(parent, w, &notes);
  EXPECT_EQ(e["PATH"], "/bin");
  EXPECT_EQ(e["RANK"], "5");  // the inherited 99 is replaced
  EXPECT_EQ(e["LOCAL_RANK"], "1");
  EXPECT_EQ(e["WORLD_SIZE"], "8");
  EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "4");
  EXPECT_EQ(e["GROUP_RANK"], "1");
  EXPECT_EQ(e["MASTER_ADDR"], "10.1.2.3");
  EXPECT_EQ(e["MASTER_PORT"], "2345");
  EXPECT_EQ(e["LOOM_RESTART_COUNT"], "2");
  EXPECT_EQ(e["TORCHELASTIC_RESTART_COUNT"], "2");
  EXPECT_EQ(e["OMP_NUM_THREADS"], "1");
  EXPECT_EQ(e["NCCL_NVLS_ENABLE"], "0");
  EXPECT_EQ(e["NVSHMEM_DISABLE_NVLS"], "1");
  EXPECT_EQ(e["TORCH_SYMM_MEM_DISABLE_MULTICAST"], "1");
  EXPECT_EQ(notes.size(), 2u);  // NCCL_NVLS_ENABLE=1 and NVSHMEM_DISABLE_NVLS=0 overridden

  // Unset switches stay unset (only NCCL's is always there); a parent's OMP_NUM_THREADS stays.
  Environment plain = worker_environment({{"OMP_NUM_THREADS", "4"}}, w);
  EXPECT_EQ(plain["NCCL_NVLS_ENABLE"], "0");
  EXPECT_EQ(plain.count("NVSHMEM_DISABLE_NVLS"), 0u);
  EXPECT_EQ(plain["OMP_NUM_THREADS"], "4");
}

TEST(WorkerProcess, ExitWords) {
  EXPECT_EQ(describe_exit(3 << 8), "exit code 3");
  EXPECT_EQ(describe_exit(0), "exited normally");
  EXPECT_EQ(describe_exit(SIGKILL), "signal 9 (SIGKILL)");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_TRUE(exited_cleanly(0));
  EXPECT_FALSE(exited_cleanly(SIGKILL));
}

TEST(WorkerProcess, MissingProgramIsAnError) {
  try {
    spawn_worker({"/nonexistent/loom_no_such_program"}, {});
    FAIL() << "must throw";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("loom_no_such_program"), std::string::npos) << e.what();
  }
  EXPECT_THROW(spawn_worker({"loom_no_such_program_on_path"}, {}), loom::Error);
}
