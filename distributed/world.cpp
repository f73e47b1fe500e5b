// The job's state (one process-wide record: the world group, the store, the backend, the job's
// environment, the sub-group counter) and the functions of world.h that read and change it:
// init_process_group, is_initialized, world, new_group, destroy_process_group, and
// make_process_group, which picks the transport by name. Leaves out: the groups' collectives
// (process_group.cpp and the transports).
#include "distributed/world.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cuda/available.h"
#include "distributed/env.h"
#include "distributed/process_group/local_process_group.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/tcp_store.h"
#ifdef LOOM_WITH_GLOO
#include "distributed/process_group/gloo_process_group.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "core/cuda/stream.h"
#include "distributed/process_group/nccl_process_group.h"
#endif

namespace loom::distributed {

namespace {
// ---------------------------------------------------------------- the job's state
struct Global {
  std::mutex mu;
  std::shared_ptr<ProcessGroup> world;
  std::shared_ptr<Store> store;  // the job's store, unprefixed
  std::string backend;
  JobEnv env;
  int device = -1;  // NCCL: this rank's CUDA device, shared by every group it makes
  int next_group = 0;
  bool exit_hook = false;
  // The process that called init_process_group; read without the lock (a forked child may find
  // mu held by a thread it does not have).
  std::atomic<pid_t> owner_pid{-1};
};
// Note [Process groups at exit]
// The job's state is never destroyed by static destruction: that runs after the CUDA runtime and
// NCCL may have unloaded, where a communicator's teardown crashes or hangs. Instead
// init_process_group registers an atexit hook (after CUDA is initialised, so it runs before CUDA's
// own teardown) that drops the world group as destroy_process_group would. A process that leaves
// through std::_Exit (a failed rank) skips it: the other ranks aborted their communicators already.
Global& global() {
  static Global* g = new Global();  // leaked on purpose, see above
  return *g;
}
// Records this rank's departure for the others (Note [Who left] in
// distributed/process_group/collective_log.h), then drops the world group and the store. g.mu held.
void leave(Global& g, const std::string& how) {
  if (g.world) g.world->record_departure(how);
  g.world.reset();
  g.store.reset();
}

// Note [Process groups and fork]
// A child made by fork() without exec has a copy of the job's state but none of its threads (the
// log's publisher and heartbeat, Gloo's workers, NCCL's watchdog) and shares the parent's store
// connections: at its exit it must neither record a departure for the parent's rank nor join
// threads it does not have. The hook only acts in the process that initialised the group.
// (A child that execs keeps nothing: the store's sockets are close-on-exec.)
void drop_world_at_exit() {
  Global& g = global();
  if (getpid() != g.owner_pid.load()) return;  // Note [Process groups and fork]
  std::lock_guard<std::mutex> lock(g.mu);
  leave(g, "exited without destroy_process_group");
}

std::string resolve_backend(const std::string& b) {
  if (b == "gloo" || b == "nccl") return b;
  LOOM_CHECK(b == "auto", "init_process_group: unknown backend '", b,
             "' (expected \"nccl\", \"gloo\" or \"auto\")");
#ifdef LOOM_WITH_NCCL
  if (cuda::device_count() > 0) return "nccl";
#endif
  return "gloo";
}
}  // namespace

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int rank, int size,
                                                 std::shared_ptr<Store> store, Millis timeout,
                                                 int device) {
  (void)device;  // NCCL only (-1: LOCAL_RANK % device_count())
  if (backend == "gloo") {
#ifdef LOOM_WITH_GLOO
    const char* h = std::getenv("LOOM_GLOO_HOSTNAME");
    std::string host = h && *h ? h : net::local_address_towards(global().env.master_addr);
    return std::make_shared<GlooProcessGroup>(rank, size, std::move(store), timeout, host);
#else
    LOOM_FAIL(
        "process group: loom was built without Gloo (install libgloo-dev and re-run cmake), "
        "so backend \"gloo\" is not available");
#endif
  }
  if (backend == "nccl") {
#ifdef LOOM_WITH_NCCL
    if (device < 0) device = job_env().local_rank % std::max(1, cuda::device_count());
    return std::make_shared<NcclProcessGroup>(rank, size, std::move(store), timeout, device);
#else
    LOOM_FAIL(
        "process group: loom was built without NCCL (a CUDA build with nccl.h and libnccl), "
        "so backend \"nccl\" is not available");
#endif
  }
  LOOM_FAIL("process group: unknown backend '", backend, "' (expected \"nccl\" or \"gloo\")");
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  LOOM_CHECK(!g.world,
             "init_process_group: already initialised (call destroy_process_group first)");
  // Keep NVLink multicast off in this process and whatever it starts (Note [NCCL and NVLS]).
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (!nvls || std::strcmp(nvls, "0") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1);
  g.env = job_env();
  g.backend = resolve_backend(options.backend);
  g.next_group = 0;
  int device = options.device;
  if (device < 0 && g.backend == "nccl")
    device = g.env.local_rank % std::max(1, cuda::device_count());
  g.device = device;
#ifdef LOOM_WITH_NCCL
  // The rank's GPU becomes current (as users expect: empty(..., cuda) and CUDA events made after
  // this are on it, and no context is created on cuda:0 by ranks that do not use it).
  if (g.backend == "nccl") cuda::set_device(device);
#endif
  g.owner_pid = getpid();
  if (!g.exit_hook) {
    std::atexit(drop_world_at_exit);  // Note [Process groups at exit]
    g.exit_hook = true;
  }
  if (g.env.world_size == 1 && !options.store) {
    g.world = std::make_shared<LocalProcessGroup>(options.timeout);
    return g.world;
  }
  g.store = options.store;
  if (!g.store) {
    TCPStoreOptions so;
    so.is_server = g.env.rank == 0 && !g.env.external_store;
    so.timeout = options.store_timeout;
    g.store = std::make_shared<TCPStore>(g.env.master_addr, g.env.master_port, so);
  }
  auto prefixed = std::make_shared<PrefixStore>("world", g.store);
  g.world = make_process_group(g.backend, g.env.rank, g.env.world_size, prefixed, options.timeout,
                               device);
  std::vector<int> all(size_t(g.env.world_size));
  for (int i = 0; i < g.env.world_size; ++i) all[size_t(i)] = i;
  g.world->set_world_ranks(all);
  return g.world;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(global().mu);
  return global().world != nullptr;
}

std::shared_ptr<ProcessGroup> world() {
  std::lock_guard<std::mutex> lock(global().mu);
  LOOM_CHECK(global().world, "distributed: no process group yet (call init_process_group first)");
  return global().world;
}

std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, Millis timeout,
                                        const std::string& backend) {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  LOOM_CHECK(g.world, "new_group: call init_process_group first");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  LOOM_CHECK(!sorted.empty(), "new_group: no ranks given");
  LOOM_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "new_group: rank listed twice in ", std::vector<int64_t>(ranks.begin(), ranks.end()));
  LOOM_CHECK(sorted.front() >= 0 && sorted.back() < g.world->size(), "new_group: ranks ",
             std::vector<int64_t>(ranks.begin(), ranks.end()), " are not all in the world of ",
             g.world->size());
  int id = ++g.next_group;  // every process counts every call, members or not
  auto it = std::find(sorted.begin(), sorted.end(), g.world->rank());
  if (it == sorted.end()) return nullptr;
  int rank = int(it - sorted.begin()), size = int(sorted.size());
  Millis t = timeout.count() > 0 ? timeout : g.world->timeout();
  std::shared_ptr<ProcessGroup> pg;
  if (size == 1) {
    pg = std::make_shared<LocalProcessGroup>(t);
  } else {
    auto store = std::make_shared<PrefixStore>("group" + std::to_string(id), g.store);
    // The same device as the world's (InitOptions::device included). NCCL: rank 0 of the
    // sub-group puts its unique id under "group<k>/nccl_id"; only members join.
    pg = make_process_group(backend.empty() ? g.backend : backend, rank, size, store, t, g.device);
  }
  pg->set_world_ranks(sorted);
  return pg;
}

void destroy_process_group() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  leave(g, "called destroy_process_group");
}

}  // namespace loom::distributed
