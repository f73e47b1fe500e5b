// loomrun's flags, parsed with CLI11; see options.h.
#include "distributed/launcher/options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "core/cuda/available.h"
#include "core/error.h"

namespace loom::distributed::launcher {

int resolve_nproc(const std::string& spec) {
  if (spec == "gpu") {
    int n = loom::cuda::device_count();
    LOOM_CHECK(n > 0, "loomrun: --nproc_per_node gpu, but no CUDA device is usable (",
               loom::cuda::compiled_with_cuda() ? "no GPU or driver" : "loom built without CUDA",
               "); give a number");
    return n;
  }
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1) threads = 1;
  if (spec == "cpu") return threads;
  if (spec == "auto") {
    int n = loom::cuda::device_count();
    return n > 0 ? n : threads;
  }
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(spec.c_str(), &end, 10);
  LOOM_CHECK(!spec.empty() && *end == '\0' && errno == 0, "loomrun: --nproc_per_node '", spec,
             "' is not a number, gpu, cpu or auto");
  LOOM_CHECK(n >= 1 && n <= 4096, "loomrun: --nproc_per_node ", n, " must be in [1, 4096]");
  return static_cast<int>(n);
}

std::vector<int> pick_free_ports(int n, const std::string& host) {
  std::vector<int> fds, ports;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      int err = errno;
      close_all();
      LOOM_FAIL("loomrun: socket() failed: ", std::strerror(err));
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1)
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      int err = errno;
      close_all();
      LOOM_FAIL("loomrun: cannot bind a free port on ", host, ": ", std::strerror(err));
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ports.push_back(ntohs(addr.sin_port));
  }
  close_all();
  return ports;
}

int pick_free_port(const std::string& host) { return pick_free_ports(1, host)[0]; }

namespace {
// "--master_port,--master-port": torchrun's spelling of a flag and the dashed one.
std::string both_spellings(const std::string& name) {
  std::string dashed = name;
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return "--" + name + (dashed == name ? "" : ",--" + dashed);
}

// An option under both spellings with its default shown in --help.
template <typename T>
CLI::Option* add_shown(CLI::App& app, const std::string& name, T& value, const std::string& help) {
  return app.add_option(both_spellings(name), value, help)->capture_default_str();
}

// loomrun's flags: torchrun's names (and dashed spellings), each filling a LaunchOptions field.
void add_launch_flags(CLI::App& app, LaunchOptions& o) {
  app.prefix_command();  // the first positional argument and everything after it: the program
  add_shown(app, "nproc_per_node", o.nproc_spec,
            "workers on this node: a number, gpu (one per CUDA device), cpu (one per hardware "
            "thread) or auto (gpu if there are GPUs, else cpu)");
  add_shown(app, "nnodes", o.nnodes, "number of nodes (one loomrun per node)");
  add_shown(app, "node_rank", o.node_rank, "this node's index in [0, nnodes)");
  add_shown(app, "master_addr", o.master_addr, "address of node 0 (it serves the store there)");
  add_shown(app, "master_port", o.master_port, "port of the workers' store on master_addr");
  app.add_flag("--standalone", o.standalone,
               "one node on this machine: master 127.0.0.1 and a free port picked by loomrun");
  add_shown(app, "worker_store", o.worker_store,
            "who serves the workers' store on master_addr:master_port: loomrun (node 0's, a "
            "fresh one per attempt; workers get LOOM_STORE_EXTERNAL=1) or rank0 (the "
            "program's rank 0, as without a launcher)")
      ->check(CLI::IsMember({"loomrun", "rank0"}));
  app.add_option(both_spellings("rdzv_port"), o.rdzv_port,
                 "with --nnodes > 1: the port of node 0's loomrun store (default master_port + 1; "
                 "the workers' own store stays on master_port)");
  add_shown(app, "max_restarts", o.max_restarts,
            "restart the whole group this many times after a failure");
  app.add_option("--grace,--grace-period", o.grace_seconds,
                 "seconds between SIGTERM and SIGKILL when stopping workers")
      ->capture_default_str();
  add_shown(app, "rdzv_timeout", o.rdzv_timeout_seconds,
            "with --nnodes > 1: seconds to wait for all nodes to join");
  add_shown(app, "node_timeout", o.node_timeout_seconds,
            "with --nnodes > 1: node 0 declares a node failed when its loomrun has not "
            "sent a heartbeat for this many seconds");
  app.add_option(both_spellings("log_dir"), o.log_dir,
                 "write each rank's output to DIR/attempt_K/rank_N.{stdout,stderr} instead of "
                 "the console");
  app.add_flag("--tee", o.tee, "with --log-dir: also print each rank's output to the console");
  add_shown(app, "tail", o.tail_lines, "stderr lines of a failed rank shown in the failure report");
  app.add_flag("--quiet", o.quiet, "no progress lines from loomrun itself (failures still print)");
}

// What is left after loomrun's flags is the program and its arguments ("--" may separate them).
void take_program(const CLI::App& app, LaunchOptions& o) {
  o.program = app.remaining();
  if (!o.program.empty() && o.program.front() == "--") {
    o.program.erase(o.program.begin());
  } else if (!o.program.empty() && o.program.front().rfind("-", 0) == 0) {
    // CLI11 hands an unknown flag over as the start of the program: say what it is instead.
    LOOM_FAIL("loomrun: unknown flag ", o.program.front(),
              " (loomrun's flags come before the program; --help lists them)");
  }
}

// The flags' values checked (errors name the flag), the worker count resolved and the ports
// picked (--standalone; --rdzv_port next to --master_port).
void check_launch_options(LaunchOptions& o) {
  LOOM_CHECK(!o.program.empty(), "loomrun: no program to run (loomrun [flags] program [args...])");
  o.nproc_per_node = resolve_nproc(o.nproc_spec);
  LOOM_CHECK(o.nnodes >= 1, "loomrun: --nnodes ", o.nnodes, " must be >= 1");
  LOOM_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes, "loomrun: --node_rank ", o.node_rank,
             " must be in [0, ", o.nnodes, ") for --nnodes ", o.nnodes);
  LOOM_CHECK(o.max_restarts >= 0, "loomrun: --max_restarts ", o.max_restarts, " must be >= 0");
  LOOM_CHECK(o.grace_seconds >= 0, "loomrun: --grace ", o.grace_seconds, " must be >= 0");
  LOOM_CHECK(o.tail_lines >= 0, "loomrun: --tail ", o.tail_lines, " must be >= 0");
  LOOM_CHECK(o.rdzv_timeout_seconds > 0, "loomrun: --rdzv_timeout ", o.rdzv_timeout_seconds,
             " must be > 0");
  LOOM_CHECK(o.node_timeout_seconds >= 2, "loomrun: --node_timeout ", o.node_timeout_seconds,
             " must be >= 2 (heartbeats are sent every second)");
  LOOM_CHECK(!o.tee || !o.log_dir.empty(), "loomrun: --tee needs --log-dir");
  if (o.standalone) {
    LOOM_CHECK(o.nnodes == 1, "loomrun: --standalone is one node, but --nnodes is ", o.nnodes);
    o.master_addr = "127.0.0.1";
    o.master_port = pick_free_port(o.master_addr);
  }
  LOOM_CHECK(o.master_port >= 1 && o.master_port <= 65535, "loomrun: --master_port ", o.master_port,
             " must be in [1, 65535]");
  if (o.rdzv_port == 0) o.rdzv_port = o.master_port < 65535 ? o.master_port + 1 : o.master_port - 1;
  LOOM_CHECK(o.rdzv_port >= 1 && o.rdzv_port <= 65535 && o.rdzv_port != o.master_port,
             "loomrun: --rdzv_port ", o.rdzv_port,
             " must be in [1, 65535] and differ from "
             "--master_port ",
             o.master_port);
}
}  // namespace

LaunchOptions parse_launch_options(int argc, char** argv) {
  LaunchOptions o;
  CLI::App app{
      "loomrun: starts N worker processes per node with torchrun's environment (RANK, LOCAL_RANK,\n"
      "WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT); when one fails, stops\n"
      "the others and says which rank failed and why.\n\n"
      "  loomrun --nproc_per_node 4 ./build/examples/train_mlp --epochs 1",
      "loomrun"};
  app.footer(
      "Every worker also gets LOOM_RESTART_COUNT (the attempt, from 0), LOOM_MAX_RESTARTS and\n"
      "NCCL_NVLS_ENABLE=0 (NVLink multicast stays off). See docs/launcher.md.");
  add_launch_flags(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  take_program(app, o);
  check_launch_options(o);
  return o;
}

}  // namespace loom::distributed::launcher
