// loomrun's command line: torchrun's flags (--nproc_per_node, --nnodes, --node_rank, --master_addr,
// --master_port, --max_restarts, --standalone) plus loom's own (grace period, log folder, tail).
// Leaves out: torchrun's elastic ranges (--nnodes MIN:MAX) and rendezvous backends (one store).
#pragma once

#include <string>
#include <vector>

namespace loom::distributed::launcher {

struct LaunchOptions {
  int nproc_per_node = 1;        // resolved from "N", "gpu", "cpu" or "auto"
  std::string nproc_spec = "1";  // as given, for messages
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;               // one node; master_port is a free port loomrun picked
  std::string worker_store = "loomrun";  // who serves the workers' store: "loomrun" or "rank0"
  int rdzv_port = 0;  // nnodes > 1: node 0's loomrun store (0 -> master_port + 1)
  int max_restarts = 0;
  double grace_seconds = 3.0;           // SIGTERM -> SIGKILL
  double node_timeout_seconds = 15.0;   // nnodes > 1: a node silent this long has failed
  double rdzv_timeout_seconds = 300.0;  // nodes joining, and node 0 waiting for the others
  std::string log_dir;                  // empty: output goes to the console, prefixed "[rank N] "
  bool tee = false;                     // with log_dir: also print to the console
  int tail_lines = 20;                  // stderr lines kept per rank for the failure report
  bool quiet = false;                   // no "loomrun: ..." progress lines (failures still print)
  std::vector<std::string> program;     // the worker's argv: program and its arguments
};

// Parses argv (argv[0] is loomrun). Everything from the first positional argument on is the
// program and its arguments (as with torchrun, "--" may separate them). On --help prints usage and
// exits 0; a bad flag prints the error and usage and exits 2 (CLI11's convention for programs).
// Value errors (nproc 0, node_rank >= nnodes, ...) throw loom::Error naming the flag and value.
LaunchOptions parse_launch_options(int argc, char** argv);

// "4" -> 4; "gpu" -> number of CUDA devices (an error when there are none); "cpu" -> hardware
// threads; "auto" -> GPUs if any, else hardware threads (torchrun's meaning).
int resolve_nproc(const std::string& spec);

// A TCP port on host that nobody listens on now (bind to port 0, read it back, close).
int pick_free_port(const std::string& host = "127.0.0.1");
// n such ports, all different: every socket stays bound until the last port is read, so the OS
// cannot hand out one port twice (two pick_free_port calls in a row can return the same port).
std::vector<int> pick_free_ports(int n, const std::string& host = "127.0.0.1");

}  // namespace loom::distributed::launcher
