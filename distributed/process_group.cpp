// ProcessGroup's checks and bookkeeping shared by every backend, the world-of-one group, and
// init_process_group / new_group (the store, the prefixes, the backend choice).
// Leaves out: the transports (gloo_process_group.cpp, nccl_process_group.cpp).
#include "distributed/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>

#include "autograd/grad_mode.h"
#include "core/cuda/available.h"
#include "distributed/env.h"
#include "distributed/socket_util.h"
#include "distributed/tcp_store.h"
#ifdef LOOM_WITH_GLOO
#include "distributed/gloo_process_group.h"
#endif
#ifdef LOOM_WITH_NCCL
#include "core/cuda/stream.h"
#include "distributed/nccl_process_group.h"
#endif

namespace loom::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Product:
      return "product";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout)
    : rank_(rank), size_(size), store_(std::move(store)), timeout_(timeout) {
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank,
             " is not in a group of size ", size);
  LOOM_CHECK(size == 1 || store_, "ProcessGroup: a group of ", size, " processes needs a store");
  LOOM_CHECK(timeout.count() > 0, "ProcessGroup: the timeout must be positive, got ",
             timeout.count(), " ms");
  log_ = std::make_unique<CollectiveLog>(store_, rank, size);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  LOOM_CHECK(t.defined(), op, ": the tensor is undefined");
  LOOM_CHECK(t.is_contiguous(), op, ": the tensor ", describe(t),
             " is not contiguous (pass t.contiguous() and copy the result back)");
  check_device(op, t);
}

namespace {
void check_reduce(const char* op, const Tensor& t, ReduceOp r) {
  LOOM_CHECK(r != ReduceOp::Avg || is_floating(t.dtype()), op,
             ": ReduceOp::Avg needs a floating-point tensor, got ", describe(t),
             " (use Sum and divide, Note [Reductions and dtypes])");
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t);
  check_reduce("all_reduce", t, op);
  return do_all_reduce(t, op, log_->begin("all_reduce", t.numel(), t.dtype()));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& t, int root) {
  check_tensor("broadcast", t);
  LOOM_CHECK(root >= 0 && root < size_, "broadcast: root ", root,
             " is not a rank of this group of ", size_);
  return do_broadcast(t, root, log_->begin("broadcast", t.numel(), t.dtype()));
}

std::shared_ptr<Work> ProcessGroup::all_gather(Tensor& out, const Tensor& in) {
  check_tensor("all_gather", out);
  check_tensor("all_gather", in);
  LOOM_CHECK(out.dtype() == in.dtype() && out.device() == in.device(), "all_gather: out ",
             describe(out), " and in ", describe(in), " differ in dtype or device");
  LOOM_CHECK(out.numel() == in.numel() * size_, "all_gather: out ", describe(out), " has ",
             out.numel(), " elements; it needs ", size_, " x ", in.numel(), " (in ", describe(in),
             ")");
  return do_all_gather(out, in, log_->begin("all_gather", in.numel(), in.dtype()));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor("reduce_scatter", out);
  check_tensor("reduce_scatter", in);
  check_reduce("reduce_scatter", in, op);
  LOOM_CHECK(out.dtype() == in.dtype() && out.device() == in.device(), "reduce_scatter: out ",
             describe(out), " and in ", describe(in), " differ in dtype or device");
  LOOM_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: in ", describe(in), " has ",
             in.numel(), " elements; it needs ", size_, " x ", out.numel(), " (out ", describe(out),
             ")");
  return do_reduce_scatter(out, in, op, log_->begin("reduce_scatter", in.numel(), in.dtype()));
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  return do_barrier(log_->begin("barrier", 0, DType::U8));
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor("send", t);
  LOOM_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send: destination ", dst,
             " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  LOOM_CHECK(tag >= 0, "send: tag ", tag, " is negative");
  return do_send(t, dst, tag, log_->point_to_point("send", t.numel(), t.dtype(), dst));
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor& t, int src, int tag) {
  check_tensor("recv", t);
  LOOM_CHECK(src >= 0 && src < size_ && src != rank_, "recv: source ", src,
             " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  LOOM_CHECK(tag >= 0, "recv: tag ", tag, " is negative");
  return do_recv(t, src, tag, log_->point_to_point("recv", t.numel(), t.dtype(), src));
}

// ---------------------------------------------------------------- a world of one
namespace {
std::shared_ptr<Work> done_work() {
  auto w = std::make_shared<CompletionWork>();
  w->mark_done();
  return w;
}

// Every collective of one process is the identity (or a copy); send/recv have no peer.
class LocalProcessGroup : public ProcessGroup {
 public:
  explicit LocalProcessGroup(Millis timeout) : ProcessGroup(0, 1, nullptr, timeout) {}
  std::string backend() const override { return "local"; }

 protected:
  std::shared_ptr<Work> do_all_reduce(Tensor&, ReduceOp, const OpRecord&) override {
    return done_work();
  }
  std::shared_ptr<Work> do_broadcast(Tensor&, int, const OpRecord&) override { return done_work(); }
  std::shared_ptr<Work> do_all_gather(Tensor& out, const Tensor& in, const OpRecord&) override {
    return copy(out, in);
  }
  std::shared_ptr<Work> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp,
                                          const OpRecord&) override {
    return copy(out, in);
  }
  std::shared_ptr<Work> do_barrier(const OpRecord&) override { return done_work(); }
  std::shared_ptr<Work> do_send(const Tensor&, int, int, const OpRecord&) override {
    LOOM_FAIL("send: a world of one has no other rank");
  }
  std::shared_ptr<Work> do_recv(Tensor&, int, int, const OpRecord&) override {
    LOOM_FAIL("recv: a world of one has no other rank");
  }
  void check_device(const char*, const Tensor&) const override {}

 private:
  static std::shared_ptr<Work> copy(Tensor& out, const Tensor& in) {
    if (out.numel() > 0 && !out.is_same(in)) {
      autograd::NoGradGuard no_grad;
      out.copy_(make_view(in, out.shape(), out.strides(), in.offset()));
    }
    return done_work();
  }
};

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
void drop_world_at_exit() {
  Global& g = global();
  std::lock_guard<std::mutex> lock(g.mu);
  g.world.reset();
  g.store.reset();
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
  g.world.reset();
  g.store.reset();
}

}  // namespace loom::distributed
