// all_reduce bandwidth, nccl-tests style: for sizes 1 KiB .. 1 GiB (x4 steps), the time per op,
// algbw = bytes / time and busbw = algbw * 2(n-1)/n. NCCL is timed with CUDA events on the compute
// stream, Gloo with the wall clock. Run under loomrun/torchrun/srun (it reads RANK, WORLD_SIZE...)
// or let it start N local processes itself: bench_allreduce --nproc 2 [--backend nccl].
// Leaves out: other collectives, and out-of-place variants.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/cuda/available.h"
#include "distributed/world.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

using namespace loom;
using namespace loom::distributed;

namespace {
struct Args {
  std::string backend = "auto";
  int nproc = 0;
  int64_t min_bytes = 1024, max_bytes = int64_t(1) << 30;
  int iters = 20, warmup = 5;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_allreduce: %s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--backend")
      a.backend = next();
    else if (f == "--nproc")
      a.nproc = std::atoi(next().c_str());
    else if (f == "--min-bytes")
      a.min_bytes = std::atoll(next().c_str());
    else if (f == "--max-bytes")
      a.max_bytes = std::atoll(next().c_str());
    else if (f == "--iters")
      a.iters = std::atoi(next().c_str());
    else if (f == "--warmup")
      a.warmup = std::atoi(next().c_str());
    else {
      std::fprintf(stderr,
                   "usage: bench_allreduce [--nproc N] [--backend nccl|gloo|auto] [--min-bytes B]"
                   " [--max-bytes B] [--iters K] [--warmup K]\n");
      std::exit(f == "--help" ? 0 : 2);
    }
  }
  return a;
}

// Starts `n` copies of this program as ranks 0..n-1 on 127.0.0.1 and waits for them.
int spawn_local(int n, char** argv) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  std::string port = std::to_string(ntohs(addr.sin_port));
  std::vector<std::string> args;
  for (char** a = argv + 1; *a; ++a) {
    if (std::string(*a) == "--nproc") {
      ++a;
      continue;
    }
    args.push_back(*a);
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("NCCL_NVLS_ENABLE", "0", 1);
      std::vector<char*> av{const_cast<char*>("/proc/self/exe")};
      for (auto& s : args) av.push_back(s.data());
      av.push_back(nullptr);
      execv("/proc/self/exe", av.data());
      std::perror("execv");
      _exit(127);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    worst = std::max(worst, code);
  }
  return worst;
}

int run(const Args& a) {
  InitOptions o;
  o.backend = a.backend;
  auto pg = init_process_group(o);
  const bool nccl = pg->backend() == "nccl";
  const int n = pg->size();
  Device device = kCPU;
#ifdef LOOM_WITH_CUDA
  // init_process_group made this rank's GPU current (InitOptions::device or LOCAL_RANK).
  if (nccl) device = cuda_device(cuda::current_device());
#endif
  if (pg->rank() == 0) {
    std::printf("# all_reduce sum float32, %d ranks, backend %s, %d iters (+%d warm-up)\n", n,
                pg->backend().c_str(), a.iters, a.warmup);
    std::printf("%14s %12s %12s %12s %12s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)");
  }
  autograd::NoGradGuard no_grad;
  for (int64_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    int64_t count = bytes / 4;
    Tensor t = empty({count}, {.dtype = kF32, .device = device});
    t.fill_(1.0);
    pg->all_reduce(t)->synchronize();  // also a correctness check
    double first = t.slice(0, 0, 1).item(), last = t.slice(0, count - 1, count).item();
    if (first != n || last != n) {
      std::fprintf(stderr, "rank %d: all_reduce of ones gave %g and %g, expected %d\n", pg->rank(),
                   first, last, n);
      return 1;
    }
    for (int i = 0; i < a.warmup; ++i) pg->all_reduce(t)->wait();
    pg->barrier()->wait();
    double us = 0;
#ifdef LOOM_WITH_CUDA
    if (nccl) {
      cuda::DeviceGuard guard(device.index);  // the events belong to the stream's device
      cudaStream_t s = cuda::current_stream(device.index);
      cuda::Event start(true), end(true);
      start.record(s);
      for (int i = 0; i < a.iters; ++i) pg->all_reduce(t)->wait();
      end.record(s);
      end.synchronize();
      us = double(start.elapsed_ms(end)) * 1000.0 / a.iters;
    }
#endif
    if (!nccl) {
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < a.iters; ++i) pg->all_reduce(t)->wait();
      us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          a.iters;
    }
    double algbw = double(bytes) / us / 1e3;  // GB/s
    double busbw = algbw * 2.0 * (n - 1) / n;
    if (pg->rank() == 0)
      std::printf("%14lld %12lld %12.1f %12.2f %12.2f\n", (long long)bytes, (long long)count, us,
                  algbw, busbw);
  }
  pg->barrier()->synchronize();
  destroy_process_group();
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  if (a.nproc > 0 && !std::getenv("RANK")) return spawn_local(a.nproc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }
}
