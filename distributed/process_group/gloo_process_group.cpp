// GlooProcessGroup: rendezvous through loom's store, the reductions for every loom dtype, and the
// worker threads that run collectives in order and turn Gloo's failures into loom errors.
// Leaves out: a native reduce_scatter (Note [Gloo reduce_scatter]).
#include "distributed/process_group/gloo_process_group.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include <cstring>
#include <type_traits>

#include "core/dispatch.h"
#include "core/error.h"

namespace loom::distributed {

namespace {
using Clock = std::chrono::steady_clock;

// Note [SIGPIPE and a dead peer]
// Gloo's TCP transport writes to its peers with writev(), which has no MSG_NOSIGNAL: a write to a
// peer that has just died raises SIGPIPE, whose default action ends this process at once (exit
// status -13 in a test), before Gloo can report the broken connection as an error naming the
// peer. The first Gloo group of a process therefore ignores SIGPIPE, as servers do, unless the
// program installed a handler of its own: the write then fails with EPIPE, Gloo throws, and the
// collective fails with loom's error ("... failed on rank R ... (did a peer exit?)"). loomrun
// resets its workers' SIGPIPE to the default, so every worker needs this. Seen as one run in 30
// of Gloo.ADeadPeerFailsTheOthersAtOnce under ThreadSanitizer, whose slowness widens the window.
void ignore_sigpipe_unless_handled() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
}

// gloo::rendezvous::Store over loom's store: get blocks until the key exists (Gloo's own stores
// poll), and the timed wait is overridden so the rendezvous honours its timeout. Both wait watching
// the rank that sets the key (Gloo's keys are the ranks' numbers): one that leaves meanwhile is
// named within seconds (Note [Who left]) instead of the rendezvous timing out.
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<distributed::Store> s, Millis t, CollectiveLog& log, int size)
      : s_(std::move(s)), t_(t), log_(log), size_(size) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    watched_wait({key}, t_);
    Bytes b = s_->get(key, t_);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { watched_wait(keys, t_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    watched_wait(keys, t);
  }

 private:
  void watched_wait(const std::vector<std::string>& keys, Millis t) {
    std::vector<int> ranks;
    for (const auto& k : keys) {
      const bool number = !k.empty() && k.size() < 9 && k.find_first_not_of("0123456789") == k.npos;
      const int r = number ? std::stoi(k) : -1;
      ranks.push_back(r < size_ ? r : -1);
    }
    log_.wait_for_keys(*s_, keys, ranks, t, "gloo rendezvous");
  }
  std::shared_ptr<distributed::Store> s_;
  Millis t_;
  CollectiveLog& log_;
  int size_;
};

// The elementwise reduction Gloo calls: out[i] = op(a[i], b[i]); 16-bit floats in float.
template <typename T>
gloo::AllreduceOptions::Func reducer(ReduceOp op) {
  using Acc = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
  auto make = [](auto f) {
    return [f](void* o, const void* a, const void* b, size_t n) {
      T* out = static_cast<T*>(o);
      const T* x = static_cast<const T*>(a);
      const T* y = static_cast<const T*>(b);
      for (size_t i = 0; i < n; ++i) out[i] = T(f(Acc(x[i]), Acc(y[i])));
    };
  };
  if constexpr (std::is_same_v<T, bool>) {  // Note [Reductions and dtypes]: or / and
    if (op == ReduceOp::Sum || op == ReduceOp::Max)
      return make([](bool a, bool b) { return a || b; });
    return make([](bool a, bool b) { return a && b; });
  } else {
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return make([](Acc a, Acc b) { return Acc(a + b); });
      case ReduceOp::Max:
        return make([](Acc a, Acc b) { return a < b ? b : a; });
      case ReduceOp::Min:
        return make([](Acc a, Acc b) { return b < a ? b : a; });
      case ReduceOp::Product:
        return make([](Acc a, Acc b) { return Acc(a * b); });
    }
  }
  LOOM_FAIL("gloo: unknown ReduceOp");
}

// All-reduce of n elements at p in place (Avg: sum, then divide the elements [lo, hi)).
void all_reduce_raw(const std::shared_ptr<gloo::Context>& ctx, void* p, int64_t n, DType dt,
                    ReduceOp op, uint32_t tag, Millis timeout, int64_t lo, int64_t hi) {
  LOOM_DISPATCH_ALL(dt, "gloo all_reduce", [&] {
    using T = scalar_t;
    gloo::AllreduceOptions opts(ctx);
    opts.setOutput(static_cast<T*>(p), size_t(n));
    opts.setReduceFunction(reducer<T>(op));
    opts.setTag(tag);
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
    if constexpr (!std::is_same_v<T, bool> && !std::is_integral_v<T>) {
      if (op == ReduceOp::Avg) {
        using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
        T* x = static_cast<T*>(p);
        for (int64_t i = lo; i < hi; ++i) x[i] = T(Acc(x[i]) / Acc(ctx->size));
      }
    }
  });
}

// The ranks of a group of `size` that never wrote "joined/<rank>" (set by each member just before
// the full-mesh rendezvous): "rank 1 never joined the group", or "" when all did or the store
// cannot be read.
std::string absent_ranks(Store& store, int me, int size) {
  std::vector<int> absent;
  try {
    for (int r = 0; r < size; ++r)
      if (r != me && !store.check({"joined/" + std::to_string(r)})) absent.push_back(r);
  } catch (const std::exception&) {
    return "";
  }
  if (absent.empty()) return "";
  std::string list;
  for (size_t i = 0; i < absent.size(); ++i)
    list += (i == 0 ? "" : i + 1 == absent.size() ? " and " : ", ") + std::to_string(absent[i]);
  return str(absent.size() == 1 ? "rank " : "ranks ", list, " never joined the group");
}

// How long a failed collective looks for the peer that left: a record lands within a moment, a
// stopped heartbeat is named after CollectiveLog::kHeartbeatStale of watching (Note [Who left]).
constexpr Millis kDepartureWait = CollectiveLog::kHeartbeatStale + Millis(1500);

// Slots for send/recv: above every slot Gloo's collectives build from their 32-bit tags.
constexpr uint64_t kP2PSlotBase = uint64_t(0xF0) << 56;
}  // namespace

// ---- construction: the transport device and the full-mesh rendezvous ----
GlooProcessGroup::GlooProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout,
                                   const std::string& hostname)
    : ProcessGroup(rank, size, store, timeout) {
  ignore_sigpipe_unless_handled();  // Note [SIGPIPE and a dead peer]
  gloo::transport::tcp::attr attr;
  attr.hostname = hostname;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // The rendezvous waits for the slowest process to start: the store's timeout, not the op's.
    Millis rendezvous = std::max(timeout, store->timeout());
    ctx->setTimeout(rendezvous);
    StoreAdapter adapter(store, rendezvous, log(), size);
    store->set("joined/" + std::to_string(rank), hostname);  // for absent_ranks, below
    ctx->connectFullMesh(adapter, device_);
    ctx->setTimeout(timeout);
    context_ = ctx;
  } catch (const std::exception& e) {
    // Who is missing: a rank that never joined, or one that left during the rendezvous (Note
    // [Who left]); else Gloo's own message alone.
    const bool named = std::string(e.what()).find(" has left the job (") != std::string::npos;
    std::string who = named ? "" : absent_ranks(*store, rank, size);
    if (who.empty() && !named) who = log().departures(kDepartureWait);
    LOOM_FAIL("gloo: rank ", rank, " of ", size, " could not connect to the others (this rank at ",
              hostname, "): ", who.empty() ? "" : who + " [", e.what(), who.empty() ? "" : "]");
  }
  collective_thread_ = std::thread([this] { worker(collectives_); });
  send_thread_ = std::thread([this] { worker(send_waits_); });
  recv_thread_ = std::thread([this] { worker(recv_waits_); });
}

GlooProcessGroup::~GlooProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  collective_thread_.join();
  send_thread_.join();
  recv_thread_.join();
}

void GlooProcessGroup::check_device(const char* op, const Tensor& t) const {
  LOOM_CHECK(t.device().is_cpu(), op, ": the gloo backend takes CPU tensors, got ", describe(t),
             " (use the nccl backend for CUDA tensors)");
}

// ---- the worker threads ----
std::shared_ptr<Work> GlooProcessGroup::enqueue(std::deque<Job>& queue, OpRecord rec,
                                                std::function<void()> run) {
  auto work = std::make_shared<CompletionWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue.push_back(Job{std::move(run), std::move(rec), work});
  }
  cv_.notify_all();
  return work;
}

void GlooProcessGroup::worker(std::deque<Job>& queue) {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and everything queued has run
      job = std::move(queue.front());
      queue.pop_front();
    }
    run_job(job);
  }
}

void GlooProcessGroup::run_job(Job& job) {
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken = broken_;
  }
  if (!broken.empty()) {
    job.work->mark_failed(str(job.rec.describe(), ": the group failed earlier: ", broken));
    return;
  }
  auto start = Clock::now();
  try {
    job.run();
    job.work->mark_done();
  } catch (const std::exception& e) {
    auto waited = std::chrono::duration_cast<Millis>(Clock::now() - start);
    const bool timed_out = waited >= timeout() * 9 / 10;  // Gloo: "Timed out waiting ..."
    // A peer that left is named (Note [Who left]); its record may land a moment after Gloo saw
    // the connection close, and a heartbeat takes 3 s to go quiet, so a failure that was not a
    // timeout waits up to kDepartureWait for either.
    const std::string gone = log().departures(timed_out ? Millis(0) : kDepartureWait);
    std::string msg;
    if (!gone.empty()) {
      msg = str(job.rec.describe(), " on rank ", rank(), ": ", gone);
    } else if (timed_out) {
      msg = log().timeout_message(job.rec, timeout());
    } else {
      msg = str(job.rec.describe(), " failed on rank ", rank(), " after ",
                double(waited.count()) / 1000.0, " s (did a peer exit?)");
    }
    // Gloo's exception may be shared with its other threads (one object rethrown wherever the
    // failure is seen): only its message leaves this handler (Note [Errors across threads]).
    msg += str(" [gloo: ", e.what(), "]");
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.empty()) broken_ = msg;
    }
    job.work->mark_failed(std::move(msg));
  }
}

// ---- collectives ----
std::shared_ptr<Work> GlooProcessGroup::do_all_reduce(Tensor& t, ReduceOp op, const OpRecord& rec) {
  auto ctx = context_;
  Millis to = timeout();
  return enqueue(collectives_, rec, [ctx, t, op, rec, to] {
    if (t.numel() == 0) return;
    all_reduce_raw(ctx, t.data_ptr(), t.numel(), t.dtype(), op, uint32_t(rec.seq), to, 0,
                   t.numel());
  });
}

std::shared_ptr<Work> GlooProcessGroup::do_broadcast(Tensor& t, int root, const OpRecord& rec) {
  auto ctx = context_;
  Millis to = timeout();
  return enqueue(collectives_, rec, [ctx, t, root, rec, to] {
    if (t.numel() == 0) return;
    gloo::BroadcastOptions opts(ctx);
    opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), size_t(t.numel()) * t.element_size());
    opts.setRoot(root);
    opts.setTag(uint32_t(rec.seq));
    opts.setTimeout(to);
    gloo::broadcast(opts);
  });
}

std::shared_ptr<Work> GlooProcessGroup::do_all_gather(Tensor& out, const Tensor& in,
                                                      const OpRecord& rec) {
  auto ctx = context_;
  Millis to = timeout();
  return enqueue(collectives_, rec, [ctx, out, in, rec, to] {
    if (in.numel() == 0) return;
    size_t bytes = size_t(in.numel()) * in.element_size();
    gloo::AllgatherOptions opts(ctx);
    opts.setInput(static_cast<uint8_t*>(in.data_ptr()), bytes);
    opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), bytes * size_t(ctx->size));
    opts.setTag(uint32_t(rec.seq));
    opts.setTimeout(to);
    gloo::allgather(opts);
  });
}

// Note [Gloo reduce_scatter]
// Debian's Gloo has reduce_scatter only as an old typed algorithm class; loom all-reduces a copy
// of `in` and keeps its own chunk: correct for every dtype and op, at the cost of moving the whole
// tensor instead of 1/size of it. NCCL has a native reduce_scatter.
std::shared_ptr<Work> GlooProcessGroup::do_reduce_scatter(Tensor& out, const Tensor& in,
                                                          ReduceOp op, const OpRecord& rec) {
  auto ctx = context_;
  Millis to = timeout();
  int r = rank();
  return enqueue(collectives_, rec, [ctx, out, in, op, rec, to, r] {
    if (out.numel() == 0) return;
    size_t es = in.element_size();
    std::vector<uint8_t> tmp(size_t(in.numel()) * es);
    std::memcpy(tmp.data(), in.data_ptr(), tmp.size());
    int64_t lo = out.numel() * r, hi = lo + out.numel();
    all_reduce_raw(ctx, tmp.data(), in.numel(), in.dtype(), op, uint32_t(rec.seq), to, lo, hi);
    std::memcpy(out.data_ptr(), tmp.data() + size_t(lo) * es, size_t(out.numel()) * es);
  });
}

std::shared_ptr<Work> GlooProcessGroup::do_barrier(const OpRecord& rec) {
  auto ctx = context_;
  Millis to = timeout();
  return enqueue(collectives_, rec, [ctx, rec, to] {
    gloo::BarrierOptions opts(ctx);
    opts.setTag(uint32_t(rec.seq));
    opts.setTimeout(to);
    gloo::barrier(opts);
  });
}

// ---- send/recv: posted now (so rings cannot deadlock), waited for on the send or recv thread
// (a recv's wait never queued behind a send's: Note [Interleaved 1F1B] in
// distributed/pipeline/interleaved_schedule.h) ----
std::shared_ptr<Work> GlooProcessGroup::p2p(const Tensor& t, bool send, int peer, int tag,
                                            const OpRecord& rec) {
  Millis to = timeout();
  std::deque<Job>& waits = send ? send_waits_ : recv_waits_;
  if (t.numel() == 0) return enqueue(waits, rec, [] {});
  std::shared_ptr<gloo::transport::UnboundBuffer> buf =
      context_->createUnboundBuffer(t.data_ptr(), size_t(t.numel()) * t.element_size());
  const uint64_t slot = kP2PSlotBase + uint64_t(tag);
  if (send)
    buf->send(peer, slot);
  else
    buf->recv(peer, slot);
  return enqueue(waits, rec, [buf, t, to, send] {
    if (send)
      buf->waitSend(to);
    else
      buf->waitRecv(to);
  });
}

std::shared_ptr<Work> GlooProcessGroup::do_send(const Tensor& t, int dst, int tag,
                                                const OpRecord& rec) {
  return p2p(t, true, dst, tag, rec);
}

std::shared_ptr<Work> GlooProcessGroup::do_recv(Tensor& t, int src, int tag, const OpRecord& rec) {
  return p2p(t, false, src, tag, rec);
}

}  // namespace loom::distributed
