// NcclProcessGroup: the unique id through the store, ops on the group's stream (Note [NCCL
// stream order]), NcclWork, and the watchdog that turns hangs into errors (Note [NCCL watchdog]).
// Leaves out: batched send/recv groups across calls (each send/recv is its own NCCL group).
#include "distributed/process_group/nccl_process_group.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "distributed/process_group/explain_nccl.h"

// Every NCCL call: on failure, the message of Note [Explaining NCCL errors]. comm: the
// communicator the call used (nullptr before one exists), for ncclGetLastError.
#define LOOM_NCCL_CHECK(call, comm)                                                                \
  do {                                                                                             \
    ncclResult_t loom_nccl_ = (call);                                                              \
    if (loom_nccl_ != ncclSuccess)                                                                 \
      ::loom::distributed::throw_nccl_error(#call, loom_nccl_, (comm), this->rank(), this->size(), \
                                            device_);                                              \
  } while (0)

namespace loom::distributed {

using Clock = std::chrono::steady_clock;

static_assert(kNcclUnhandledCudaError == int(ncclUnhandledCudaError) &&
              kNcclSystemError == int(ncclSystemError) &&
              kNcclInternalError == int(ncclInternalError) &&
              kNcclInvalidArgument == int(ncclInvalidArgument) &&
              kNcclInvalidUsage == int(ncclInvalidUsage) &&
              kNcclRemoteError == int(ncclRemoteError) && kNcclInProgress == int(ncclInProgress));

namespace {
std::string nccl_failure_text(const std::string& call, ncclResult_t r, ncclComm_t comm, int rank,
                              int world, int device) {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) version = 0;
  const char* last = ncclGetLastError(comm);
  return explain_nccl_error({.call = call,
                             .result = int(r),
                             .error_string = ncclGetErrorString(r),
                             .last_error = last ? last : "",
                             .rank = rank,
                             .world = world,
                             .device = device,
                             .nccl_version = version});
}

[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t r, ncclComm_t comm, int rank,
                                   int world, int device) {
  throw Error(nccl_failure_text(call, r, comm, rank, world, device));
}
}  // namespace

void ensure_nvls_disabled() {
  const char* v = std::getenv("NCCL_NVLS_ENABLE");
  if (!v || std::strcmp(v, "0") != 0) setenv("NCCL_NVLS_ENABLE", "0", 1);
}

struct NcclProcessGroup::Comm {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // this group's own stream (Note [NCCL stream order])
};

struct NcclProcessGroup::Health {
  std::atomic<bool> broken{false};
};

// Note [NCCL stream order]
// Like PyTorch: an op (1) records an event on the device's current (compute) stream and makes the
// group's stream wait for it, so the NCCL kernel reads what the compute stream wrote; (2) runs on
// the group's stream; (3) tells the caching allocator the tensors are used there (record_stream),
// so freeing them on the compute stream cannot hand their memory out before the collective is
// done; (4) records an end event. Work::wait() makes the current compute stream wait for that
// event (no host block); synchronize() blocks the host until it completes or the watchdog fails
// it; is_completed() asks the event itself (no watchdog delay).
// Each group has its own stream (never the device's shared comm stream): two groups' kernels on
// one stream would run in one rank's issue order, and ranks that issue two groups' ops in
// different orders (legal: the order rule is per group) would deadlock. The stream is never
// destroyed: tensors recorded on it may be freed after the group, and the allocator then records
// an event on it.

// Note [NCCL failure order]
// ncclCommAbort makes the pending kernels return, so their end events complete: an event that
// completed says "finished or aborted", never "succeeded" by itself. Hence:
// - the watchdog, holding the group's mutex, (1) sets Health::broken, (2) fails every
//   outstanding work with the error, (3) only then calls ncclCommAbort. A work leaves the
//   outstanding list only when the watchdog saw its event complete before any abort (success).
// - a waiter (synchronize, is_completed) that sees the end event complete first reads
//   Health::broken: if set, it does not decide; the watchdog fails that work (step 2) at once.
//   If not set, it finishes the work with success and then reports the work's final state, which
//   is the watchdog's error if the watchdog finished it first.
// Interleavings of waiter W (query Q, read broken R, finish F) and watchdog D (steps 1-3):
// - Q before D1: the event completed before any abort, so the kernel really finished. If R sees
//   broken anyway, W waits for D2, which fails it (a conservative error on a broken group);
//   otherwise F races D2 under the work's mutex, whichever comes first wins and W reports it.
// - Q after D1: the completion may be the abort's. R sees broken (D1 happened before, atomics are
//   sequentially consistent), so W never marks success; D2 fails the work (it was outstanding:
//   ops launched after D1 are refused, launch and D hold the same mutex).
// - A work the watchdog already reaped is finished with success before D1: nothing to race.
// So no waiter reports success for an op that the abort cut short.
class NcclWork : public Work {
 public:
  // captured: launched while the compute stream was being captured into a CUDA graph (Note [NCCL
  // under graph capture]); its end event belongs to the capture, not to a launch.
  NcclWork(OpRecord rec, int device, bool host_blocking, bool captured,
           std::shared_ptr<NcclProcessGroup::Health> health)
      : rec_(std::move(rec)),
        device_(device),
        host_blocking_(host_blocking),
        captured_(captured),
        start_(Clock::now()),
        health_(std::move(health)) {
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming));
  }
  ~NcclWork() override { cudaEventDestroy(end_); }

  bool wait(Millis timeout) override {
    if (host_blocking_) return synchronize_for(timeout);  // barrier: the host waits
    rethrow();
    cuda::DeviceGuard g(device_);
    cudaStream_t s = cuda::current_stream(device_);
    // Inside the capture this joins the group's stream back into the graph (Note [NCCL under
    // graph capture]); after it, the event stands for no launch a stream could wait for.
    LOOM_CHECK(!captured_ || cuda::is_capturing(s), rec_.describe(),
               ": wait() after the CUDA graph capture it belongs to ended; a captured collective "
               "is waited for inside the capture (each replay then includes the wait)");
    LOOM_CUDA_CHECK(cudaStreamWaitEvent(s, end_, 0));
    return true;
  }
  void synchronize() override {
    check_not_captured("synchronize()");
    synchronize_for(kNoTimeout);
  }
  bool is_completed() override {
    check_not_captured("is_completed()");
    return poll();
  }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return err_;
  }

  // ---- for the group and its watchdog ----
  cudaEvent_t end() const { return end_; }
  const OpRecord& rec() const { return rec_; }
  Clock::time_point start() const { return start_; }
  void finish(std::exception_ptr err) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_ && !err_) {
      done_ = err == nullptr;
      err_ = err;
    }
  }

 private:
  void check_not_captured(const char* what) const {
    LOOM_CHECK(!captured_, rec_.describe(), ": ", what,
               " on a collective captured into a CUDA graph: it runs only when the graph is "
               "replayed, so the host cannot wait for it (wait() orders the capturing stream; "
               "ProcessGroup::watch_graph_replay watches a replay)");
  }
  void rethrow() {
    std::lock_guard<std::mutex> lock(mu_);
    if (err_) std::rethrow_exception(err_);
  }
  // True once the work finished (with success or an error), Note [NCCL failure order].
  bool poll() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_ || err_) return true;
    }
    cudaError_t q = cudaEventQuery(end_);
    if (q == cudaErrorNotReady) return false;
    if (q != cudaSuccess) {
      cudaGetLastError();
      finish(std::make_exception_ptr(
          Error(str(rec_.describe(), ": CUDA error while waiting: ", cudaGetErrorString(q)))));
      return true;
    }
    if (health_->broken.load()) return false;  // the watchdog is failing it (step 2)
    finish(nullptr);
    return true;
  }
  // Polls (never cudaEventSynchronize: a hung kernel would hold the host past the abort).
  // False if not finished within `timeout` (the op goes on; the watchdog times it out).
  bool synchronize_for(Millis timeout) {
    auto deadline = timeout == kNoTimeout ? Clock::time_point::max() : Clock::now() + timeout;
    while (!poll()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    rethrow();
    return true;
  }

  OpRecord rec_;
  int device_;
  bool host_blocking_;
  bool captured_;
  Clock::time_point start_;
  std::shared_ptr<NcclProcessGroup::Health> health_;
  cudaEvent_t end_ = nullptr;
  std::mutex mu_;
  bool done_ = false;
  std::exception_ptr err_;
};

namespace {
ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::F16:
      return ncclFloat16;
    case DType::BF16:
      return ncclBfloat16;
    case DType::I64:
      return ncclInt64;
    case DType::I32:
      return ncclInt32;
    case DType::U8:
    case DType::Bool:
      return ncclUint8;
  }
  return ncclUint8;
}

// Note [Reductions and dtypes]: bool Sum/Max = or (NCCL max on 0/1), Product/Min = and (min).
ncclRedOp_t nccl_op(ReduceOp op, DType d) {
  if (d == DType::Bool) return (op == ReduceOp::Sum || op == ReduceOp::Max) ? ncclMax : ncclMin;
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Avg:
      return ncclAvg;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Product:
      return ncclProd;
  }
  return ncclSum;
}
}  // namespace

NcclProcessGroup::NcclProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout,
                                   int device)
    : ProcessGroup(rank, size, store, timeout),
      device_(device),
      comm_(std::make_unique<Comm>()),
      health_(std::make_shared<Health>()) {
  int n = cuda::device_count();
  LOOM_CHECK(device >= 0 && device < n, "nccl: rank ", rank, " asked for cuda:", device,
             " but this process sees ", n,
             " CUDA device(s) (set LOCAL_RANK or CUDA_VISIBLE_DEVICES)");
  ensure_nvls_disabled();
  // Everything below (NCCL's own allocations, the stream, the buffer) belongs to cuda:device.
  cuda::DeviceGuard g(device_);
  ncclUniqueId id;
  if (rank == 0) {
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
    const uint8_t* p = reinterpret_cast<const uint8_t*>(&id);
    store->set("nccl_id", Bytes(p, p + sizeof(id)));
  } else {
    // Rank 0 leaving first is named within seconds (Note [Who left]), not after the timeout.
    wait_for_keys({"nccl_id"}, {0}, store->timeout(), "nccl: waiting for rank 0's unique id");
    Bytes b = store->get("nccl_id");
    LOOM_CHECK(b.size() == sizeof(id), "nccl: the unique id in the store has ", b.size(),
               " bytes, expected ", sizeof(id));
    std::memcpy(&id, b.data(), sizeof(id));
  }
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_->stream, cudaStreamNonBlocking));
  LOOM_NCCL_CHECK(ncclCommInitRank(&comm_->comm, size, id, rank), nullptr);
  barrier_buf_ = empty({1}, {.dtype = DType::F32, .device = cuda_device(device_)});
  barrier_buf_.fill_(0.0);
  watchdog_ = std::thread([this] { watchdog(); });
}

// Note [NCCL teardown]
// The destructor lets the watchdog run until every outstanding op finished or the group broke
// (so at most the timeout; a healthy group finishes at once), then stops it. A healthy
// communicator is destroyed (ncclCommDestroy, which waits for nothing more: its ops are done); a
// broken one was already aborted by the watchdog. The group's stream is kept (Note [NCCL stream
// order]). Groups are never destroyed by static destruction after CUDA unloads:
// init_process_group registers an atexit hook that drops the world first (Note [Process groups
// at exit] in distributed/world.cpp).
NcclProcessGroup::~NcclProcessGroup() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return outstanding_.empty() || !broken_.empty(); });
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
  int prev = -1;  // no DeviceGuard: it may throw, and a destructor must not
  cudaGetDevice(&prev);
  if (prev != device_) cudaSetDevice(device_);
  barrier_buf_ = Tensor();
  if (comm_->comm) ncclCommDestroy(comm_->comm);
  comm_->comm = nullptr;
  if (prev != device_ && prev >= 0) cudaSetDevice(prev);
  cudaGetLastError();
}

void NcclProcessGroup::check_device(const char* op, const Tensor& t) const {
  LOOM_CHECK(t.device() == cuda_device(device_), op,
             ": this nccl group's tensors live on cuda:", device_, ", got ", describe(t));
}

// Note [NCCL under graph capture]
// NCCL's collectives can be captured into a CUDA graph, which is how DDP's bucket all-reduces
// become part of the whole-step graph (Note [The training step as a CUDA graph] in
// train/cuda_graph_step.h). An op launched while the device's current (compute) stream is being
// captured: (1) the ready event recorded on the capturing stream, waited for by the group's
// stream, pulls the group's stream into the capture (a fork), so the NCCL kernel becomes a node
// of the graph after the compute work it reads; (2) its end event is recorded in the capture, and
// Work::wait() on the capturing stream joins the group's stream back (every captured op must be
// waited for before the capture ends, or the capture fails as unjoined); (3) the work is not
// given to the watchdog: its event stands for a node of a graph that has not run, which may not
// be queried during the capture and means nothing after it. synchronize() and is_completed() on
// it are errors, and so are host-blocking ops (barrier). Each replay is watched instead:
// watch_graph_replay records an event on the stream the graph was launched on and hands it to
// the watchdog like any op, so a replay stuck on a peer times out (or names a rank that left) as
// an eager collective does. Sequence numbers: the captured ops take theirs at capture, the same
// on every rank, and each watched replay takes one more.
template <typename Body>
std::shared_ptr<Work> NcclProcessGroup::launch(const OpRecord& rec,
                                               std::initializer_list<Tensor> tensors,
                                               bool host_blocking, Body&& body) {
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_CHECK(broken_.empty(), rec.describe(), ": the group failed earlier: ", broken_);
  cuda::DeviceGuard g(device_);
  cudaStream_t compute = cuda::current_stream(device_), comm = comm_->stream;
  const bool captured = cuda::is_capturing(compute);  // the group's stream joins the capture
  LOOM_CHECK(!captured || !host_blocking, rec.describe(),
             ": the host waits for this op, which a CUDA graph capture cannot hold (the op would "
             "run only at replay); issue it before or after the capture");
  if (!captured) cuda::check_not_capturing(comm, "a NCCL collective");
  auto work = std::make_shared<NcclWork>(rec, device_, host_blocking, captured, health_);
  cuda::Event ready;
  ready.record(compute);
  ready.wait(comm);
  try {
    body(comm_->comm, comm);
  } catch (const Error& e) {  // the NCCL call's explanation, prefixed with the op
    throw Error(str(rec.describe(), ": ", e.what()));
  }
  for (const Tensor& t : tensors)
    if (t.numel() > 0) cuda::record_stream(t, comm);
  LOOM_CUDA_CHECK(cudaEventRecord(work->end(), comm));
  if (captured) return work;  // the watchdog watches its replays instead (the Note)
  outstanding_.push_back(work);
  cv_.notify_all();
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::watch_graph_replay() {
  OpRecord rec = log().begin("graph_replay", 0, DType::U8);
  std::lock_guard<std::mutex> lock(mu_);
  LOOM_CHECK(broken_.empty(), rec.describe(), ": the group failed earlier: ", broken_);
  cuda::DeviceGuard g(device_);
  cudaStream_t s = cuda::current_stream(device_);
  cuda::check_not_capturing(s, "ProcessGroup::watch_graph_replay (a replay is watched after it)");
  auto work = std::make_shared<NcclWork>(rec, device_, false, false, health_);
  LOOM_CUDA_CHECK(cudaEventRecord(work->end(), s));
  outstanding_.push_back(work);
  cv_.notify_all();
  return work;
}

std::shared_ptr<Work> NcclProcessGroup::do_all_reduce(Tensor& t, ReduceOp op, const OpRecord& rec) {
  return launch(rec, {t}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (t.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                  nccl_dtype(t.dtype()), nccl_op(op, t.dtype()), c, s),
                    c);
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_broadcast(Tensor& t, int root, const OpRecord& rec) {
  return launch(rec, {t}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (t.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                  nccl_dtype(t.dtype()), root, c, s),
                    c);
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_all_gather(Tensor& out, const Tensor& in,
                                                      const OpRecord& rec) {
  return launch(rec, {out, in}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (in.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()),
                                  nccl_dtype(in.dtype()), c, s),
                    c);
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_reduce_scatter(Tensor& out, const Tensor& in,
                                                          ReduceOp op, const OpRecord& rec) {
  return launch(rec, {out, in}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (out.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                      nccl_dtype(in.dtype()), nccl_op(op, in.dtype()), c, s),
                    c);
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_barrier(const OpRecord& rec) {
  Tensor b = barrier_buf_;
  return launch(rec, {b}, true, [&](ncclComm_t c, cudaStream_t s) {
    LOOM_NCCL_CHECK(ncclAllReduce(b.data_ptr(), b.data_ptr(), 1, ncclFloat32, ncclSum, c, s), c);
  });
}

// send/recv: each is its own NCCL group; a rank's sends and recvs run in call order on the
// group's stream, so a ring must alternate (even ranks send first, odd ranks receive first).
std::shared_ptr<Work> NcclProcessGroup::do_send(const Tensor& t, int dst, int tag,
                                                const OpRecord& rec) {
  (void)tag;  // NCCL matches by order per peer, not by tag
  return launch(rec, {t}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (t.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclGroupStart(), c);
    LOOM_NCCL_CHECK(
        ncclSend(t.data_ptr(), size_t(t.numel()) * t.element_size(), ncclUint8, dst, c, s), c);
    LOOM_NCCL_CHECK(ncclGroupEnd(), c);
  });
}

std::shared_ptr<Work> NcclProcessGroup::do_recv(Tensor& t, int src, int tag, const OpRecord& rec) {
  (void)tag;
  return launch(rec, {t}, false, [&](ncclComm_t c, cudaStream_t s) {
    if (t.numel() == 0) return;
    LOOM_NCCL_CHECK(ncclGroupStart(), c);
    LOOM_NCCL_CHECK(
        ncclRecv(t.data_ptr(), size_t(t.numel()) * t.element_size(), ncclUint8, src, c, s), c);
    LOOM_NCCL_CHECK(ncclGroupEnd(), c);
  });
}

// Note [NCCL watchdog]
// Every 50 ms: outstanding works whose end event completed are finished (success: no abort has
// happened yet); NCCL's asynchronous error (a peer gone, a network failure) or a work older than
// the timeout fails the group in the order of Note [NCCL failure order]: every outstanding work
// fails with the message (Note [Timeout errors]), then ncclCommAbort (which makes the hung kernels
// return; no peer needs to answer it), and later ops fail at once. The watchdog wakes the
// destructor whenever the outstanding list shrinks.
void NcclProcessGroup::watchdog() {
  cudaSetDevice(device_);  // this thread's CUDA calls use the group's device (no context on 0)
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    if (stop_ || !broken_.empty() || !comm_->comm) continue;
    for (auto it = outstanding_.begin(); it != outstanding_.end();) {
      if (cudaEventQuery((*it)->end()) == cudaSuccess) {
        (*it)->finish(nullptr);
        it = outstanding_.erase(it);
      } else {
        cudaGetLastError();
        ++it;
      }
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_->comm, &async);
    std::string msg;
    if (async != ncclSuccess && async != ncclInProgress) {
      const OpRecord& r = outstanding_.empty() ? OpRecord{"nccl", 0, 0, DType::U8, -1}
                                               : outstanding_.front()->rec();
      msg = nccl_failure_text(str(r.describe(), ", as ncclCommGetAsyncError reported,"), async,
                              comm_->comm, rank(), size(), device_);
    } else if (!outstanding_.empty() && departure_due()) {
      // Note [Who left]: an op waiting for more than a second looks for a peer that left (its
      // record, or its heartbeat stopped) twice a second, so a rank stuck on a departed peer
      // fails within a few seconds, not the timeout.
      std::shared_ptr<NcclWork> waiting = outstanding_.front();
      lock.unlock();
      const std::string gone = log().departures(std::chrono::milliseconds(0));
      lock.lock();
      if (!gone.empty() && cudaEventQuery(waiting->end()) != cudaSuccess && !stop_ &&
          broken_.empty())
        msg = str(waiting->rec().describe(), " on rank ", rank(), ": ", gone);
      cudaGetLastError();
    }
    if (msg.empty() && !outstanding_.empty() && broken_.empty() && !stop_ &&
        Clock::now() - outstanding_.front()->start() > timeout()) {
      std::shared_ptr<NcclWork> late = outstanding_.front();
      lock.unlock();  // reading the store takes a moment; ops issued meanwhile queue behind
      msg = log().timeout_message(late->rec(), timeout());
      lock.lock();
      // It may have finished while the store was read: then it is reaped next round.
      if (cudaEventQuery(late->end()) == cudaSuccess || stop_ || !broken_.empty()) msg.clear();
      cudaGetLastError();
    }
    if (!msg.empty()) fail_all(msg);
    cv_.notify_all();
  }
}

// True twice a second while the oldest outstanding op has waited for more than a second (a
// stopped heartbeat is named after 3 s of such looks: within about 4.5 s of the death).
bool NcclProcessGroup::departure_due() {
  const auto now = Clock::now();
  if (now - outstanding_.front()->start() < std::chrono::seconds(1)) return false;
  if (now - last_departure_check_ < std::chrono::milliseconds(500)) return false;
  last_departure_check_ = now;
  return true;
}

void NcclProcessGroup::fail_all(const std::string& msg) {
  broken_ = msg;
  health_->broken.store(true);  // (1) waiters stop deciding success on their own
  auto err = std::make_exception_ptr(Error(msg));
  for (auto& w : outstanding_) w->finish(err);  // (2) every outstanding work fails
  outstanding_.clear();
  ncclCommAbort(comm_->comm);  // (3) only now may the kernels return and the events complete
  comm_->comm = nullptr;
}

}  // namespace loom::distributed
