// A worker the distributed tests start N times (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set):
// "collectives" checks every op against a reference computed here; "timeout" has the last rank
// stop calling collectives and checks the others' error; "peer_exit" has it exit instead; "leave"
// and "finish" check who is named as gone, and that a normal end says nothing. Exit 0 =
// pass; failures go to stderr. Backend from LOOM_TEST_BACKEND ("gloo" or "nccl"; tensors on
// cuda:LOCAL_RANK for nccl).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <string>
#include <thread>
#include <type_traits>

#include "core/cuda/available.h"
#include "core/tensor.h"
#include "distributed/env.h"
#include "distributed/world.h"

using namespace loom;
using namespace loom::distributed;

namespace {
#define EXPECT_TOOL(cond, ...)                                                            \
  do {                                                                                    \
    if (!(cond)) throw std::runtime_error(str("check failed: " #cond ": ", __VA_ARGS__)); \
  } while (0)

Device g_device;

std::string backend_name() {
  const char* b = std::getenv("LOOM_TEST_BACKEND");
  return b ? b : "gloo";
}

// The value rank r holds at element i: small integers, so float sums/products are exact.
template <typename T>
T value(int r, int64_t i) {
  int64_t k = (i * 7 + r * 3) % 5;
  if constexpr (std::is_same_v<T, bool>)
    return k % 3 == 0;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return T(k);
  else
    return T(float(k - 2));
}

template <typename T>
Tensor filled(int r, int64_t n, int64_t offset = 0) {
  Tensor t = empty({n}, {.dtype = DTypeOf<T>::value});
  T* p = n ? t.data<T>() : nullptr;
  for (int64_t i = 0; i < n; ++i) p[i] = value<T>(r, offset + i);
  return g_device.is_cpu() ? t : t.to(g_device);
}

template <typename T>
T combine(T a, T b, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    return (op == ReduceOp::Sum || op == ReduceOp::Max) ? (a || b) : (a && b);
  } else {
    using Acc = std::conditional_t<std::is_integral_v<T>, T,
                                   std::conditional_t<std::is_same_v<T, double>, double, float>>;
    Acc x = Acc(a), y = Acc(b);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return T(Acc(x + y));
      case ReduceOp::Max:
        return T(x < y ? y : x);
      case ReduceOp::Min:
        return T(y < x ? y : x);
      case ReduceOp::Product:
        return T(Acc(x * y));
    }
  }
  return a;
}

// The reduction over `ranks` of element i, as this test expects it.
template <typename T>
T reduced(const std::vector<int>& ranks, int64_t i, ReduceOp op) {
  T acc = value<T>(ranks[0], i);
  for (size_t k = 1; k < ranks.size(); ++k) acc = combine(acc, value<T>(ranks[k], i), op);
  if constexpr (!std::is_integral_v<T>) {
    if (op == ReduceOp::Avg) {
      using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
      acc = T(Acc(acc) / Acc(ranks.size()));
    }
  }
  return acc;
}

template <typename T>
void expect_equal(const Tensor& got_dev, int64_t n, const std::string& what,
                  const std::function<T(int64_t)>& want) {
  Tensor got = got_dev.device().is_cpu() ? got_dev : got_dev.to(kCPU);
  EXPECT_TOOL(got.numel() == n, what, ": ", got.numel(), " elements, want ", n);
  const T* p = n ? got.data<T>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T w = want(i);
    bool same;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      same = float(p[i]) == float(w);
    else
      same = p[i] == w;
    EXPECT_TOOL(same, what, ": element ", i, " is ", double(p[i]), ", want ", double(w));
  }
}

template <typename T>
void check_dtype(ProcessGroup& pg, const std::vector<int>& ranks,
                 const std::vector<int64_t>& sizes) {
  const int me = ranks[size_t(pg.rank())], n_ranks = pg.size();
  const std::string dt = dtype_name(DTypeOf<T>::value);
  for (int64_t n : sizes) {
    std::string at = str(dt, " n=", n, " group of ", n_ranks);
    for (ReduceOp op :
         {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
      Tensor t = filled<T>(me, n);
      if (op == ReduceOp::Avg && !is_floating(DTypeOf<T>::value)) {
        bool threw = false;
        try {
          pg.all_reduce(t, op);
        } catch (const Error& e) {
          threw = std::string(e.what()).find("Avg") != std::string::npos;
        }
        EXPECT_TOOL(threw, at, ": Avg on an integer dtype must be an error naming Avg");
        continue;
      }
      pg.all_reduce(t, op)->wait();
      expect_equal<T>(t, n, str("all_reduce ", reduce_op_name(op), " ", at),
                      [&](int64_t i) { return reduced<T>(ranks, i, op); });
    }
    for (int root : {0, n_ranks - 1}) {
      Tensor t = filled<T>(me, n);
      pg.broadcast(t, root)->wait();
      expect_equal<T>(t, n, str("broadcast root ", root, " ", at),
                      [&](int64_t i) { return value<T>(ranks[size_t(root)], i); });
    }
    {
      Tensor in = filled<T>(me, n), out = filled<T>(99, n * n_ranks);
      pg.all_gather(out, in)->wait();
      expect_equal<T>(out, n * n_ranks, "all_gather " + at, [&](int64_t i) {
        return value<T>(ranks[size_t(i / std::max<int64_t>(n, 1))], i % std::max<int64_t>(n, 1));
      });
    }
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      Tensor in = filled<T>(me, n * n_ranks), out = filled<T>(99, n);
      pg.reduce_scatter(out, in, op)->wait();
      expect_equal<T>(out, n, str("reduce_scatter ", reduce_op_name(op), " ", at),
                      [&](int64_t i) { return reduced<T>(ranks, pg.rank() * n + i, op); });
    }
    if (n_ranks > 1) {  // a ring: send to the next rank, receive from the previous one (even ranks
                        // send first:
                        // NCCL runs a rank's sends and recvs in call order)
      Tensor s = filled<T>(me, n), r = filled<T>(99, n);
      int next = (pg.rank() + 1) % n_ranks, prev = (pg.rank() + n_ranks - 1) % n_ranks;
      std::shared_ptr<Work> ws, wr;
      if (pg.rank() % 2 == 0) {
        ws = pg.send(s, next, 5);
        wr = pg.recv(r, prev, 5);
      } else {
        wr = pg.recv(r, prev, 5);
        ws = pg.send(s, next, 5);
      }
      ws->wait();
      wr->wait();
      expect_equal<T>(r, n, "send/recv ring " + at,
                      [&](int64_t i) { return value<T>(ranks[size_t(prev)], i); });
    }
  }
}

void check_group(ProcessGroup& pg, const std::vector<int>& ranks, bool big) {
  check_dtype<float>(pg, ranks,
                     big ? std::vector<int64_t>{0, 1, 7, 1000003} : std::vector<int64_t>{0, 7});
  check_dtype<double>(pg, ranks, {1, 7, 1003});
  check_dtype<Half>(pg, ranks, {0, 7, 1003});
  check_dtype<BFloat16>(pg, ranks, big ? std::vector<int64_t>{7, 100003} : std::vector<int64_t>{7});
  check_dtype<int64_t>(pg, ranks, {1, 1003});
  check_dtype<int32_t>(pg, ranks, {7});
  check_dtype<uint8_t>(pg, ranks, {0, 1003});
  check_dtype<bool>(pg, ranks, {1, 7});
  pg.barrier()->wait();
}

void check_errors(ProcessGroup& pg) {
  auto expect_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_TOOL(std::string(e.what()).find(needle) != std::string::npos, "error '", e.what(),
                  "' does not mention '", needle, "'");
      return;
    }
    throw std::runtime_error("expected an error mentioning '" + needle + "'");
  };
  Tensor m = filled<float>(0, 6).view({2, 3}).t();
  expect_error([&] { pg.all_reduce(m); }, "not contiguous");
  Tensor in = filled<float>(0, 3), out = filled<float>(0, 4);
  expect_error([&] { pg.all_gather(out, in); }, "all_gather: out float32 [4]");
  expect_error([&] { pg.broadcast(in, pg.size()); }, "root");
  if (pg.backend() == "gloo" && g_device.is_cpu()) {
    // Gloo rejects CUDA tensors by name; without a GPU this is checked by the message only.
  }
}

// is_completed() on an op that cannot have finished: the last rank joins 700 ms late, so the
// others' all_reduce is still pending; it must say false (and no error), then true after
// synchronize(). An op issued before another that was synchronized is complete at once (NCCL:
// the same stream ran it first; is_completed() asks its end event, not a periodic watchdog).
void check_is_completed(ProcessGroup& pg, const std::vector<int>& ranks) {
  const int me = pg.rank(), late = pg.size() - 1;
  Tensor a = filled<float>(me, 4096), b = filled<float>(me, 4096);
  if (me == late) std::this_thread::sleep_for(Millis(700));
  auto wa = pg.all_reduce(a);
  if (me != late) {
    std::this_thread::sleep_for(Millis(100));
    EXPECT_TOOL(!wa->is_completed(), "rank ", me,
                ": is_completed() is true for an all_reduce that rank ", late,
                " has not joined yet");
    EXPECT_TOOL(!wa->error(), "rank ", me, ": a pending all_reduce has an error");
  }
  auto wb = pg.all_reduce(b);
  wb->synchronize();
  EXPECT_TOOL(wb->is_completed() && !wb->error(), "is_completed() is false after synchronize()");
  EXPECT_TOOL(wa->is_completed() && !wa->error(),
              "is_completed() is false for an op issued before one that synchronize() saw finish");
  wa->wait();
  expect_equal<float>(a, 4096, "all_reduce checked with is_completed",
                      [&](int64_t i) { return reduced<float>(ranks, i, ReduceOp::Sum); });
}

int collectives() {
  InitOptions o;
  o.backend = backend_name();
  auto pg = init_process_group(o);
  int world = pg->size(), me = pg->rank();
  std::vector<int> all;
  for (int i = 0; i < world; ++i) all.push_back(i);
  check_errors(*pg);
  check_group(*pg, all, true);
  // Several ops in flight at once, waited for afterwards: they complete in order.
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<Work>> ws;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(filled<float>(me, 1000 + k));
    ws.push_back(pg->all_reduce(ts.back()));
  }
  for (int k = 0; k < 8; ++k) {
    ws[size_t(k)]->wait();         // NCCL: orders the compute stream only; the host may run ahead
    ws[size_t(k)]->synchronize();  // the host waits (every backend)
    EXPECT_TOOL(ws[size_t(k)]->is_completed() && !ws[size_t(k)]->error(), "async op ", k);
    expect_equal<float>(ts[size_t(k)], 1000 + k, str("async all_reduce ", k),
                        [&](int64_t i) { return reduced<float>(all, i, ReduceOp::Sum); });
  }
  check_is_completed(*pg, all);
  // Sub-groups: the even ranks, and {last, 0} (every rank calls new_group for both).
  std::vector<int> even, ends = {world - 1, 0};
  for (int i = 0; i < world; i += 2) even.push_back(i);
  auto g_even = new_group(even);
  auto g_ends = new_group(ends);
  EXPECT_TOOL((g_even != nullptr) == (me % 2 == 0), "new_group membership of rank ", me);
  if (g_even) check_group(*g_even, even, false);
  if (g_ends) {
    std::vector<int> sorted = {0, world - 1};
    if (world - 1 == 0) sorted = {0};
    check_group(*g_ends, sorted, false);
  }
  pg->barrier()->wait();
  std::cout << "rank " << me << ": ok" << std::endl;
  destroy_process_group();
  return 0;
}

// The last rank runs `stop_after` collectives, then stops calling them (sleeps); the others call
// one more, which must fail within timeout + 5 s, naming the op, its sequence and the late rank.
int timeout_test() {
  int ms =
      std::atoi(std::getenv("LOOM_TEST_TIMEOUT_MS") ? std::getenv("LOOM_TEST_TIMEOUT_MS") : "2000");
  InitOptions o;
  o.backend = backend_name();
  o.timeout = Millis(ms);
  auto pg = init_process_group(o);
  int me = pg->rank(), late = pg->size() - 1;
  for (int k = 0; k < 3; ++k) {
    Tensor t = filled<float>(me, 4096);
    pg->all_reduce(t)->wait();
  }
  if (me == late) {
    std::this_thread::sleep_for(Millis(ms + 8000));
    std::_Exit(0);  // no communicator teardown: the others aborted theirs
  }
  Tensor t = filled<float>(me, 4096);
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    pg->all_reduce(t)->wait();
    // NCCL's wait does not block the host: synchronize does.
    pg->barrier()->synchronize();
  } catch (const Error& e) {
    msg = e.what();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "rank " << me << " after " << s << " s: " << msg << std::endl;
  std::string want_late =
      str("rank ", late, " has not reached it (its last collective: all_reduce #3)");
  EXPECT_TOOL(msg.find("all_reduce #4 (4096 float32 elements) timed out") != std::string::npos,
              msg);
  EXPECT_TOOL(msg.find(want_late) != std::string::npos, msg);
  EXPECT_TOOL(s < ms / 1000.0 + 5.0, "failed after ", s, " s");
  // The group is broken: the next op fails at once with the same message. With NCCL this also
  // shows that ncclCommAbort returned: the watchdog holds the group's lock while it aborts.
  auto again_start = std::chrono::steady_clock::now();
  std::string again;
  try {
    pg->all_reduce(t)->synchronize();
  } catch (const Error& e) {
    again = e.what();
  }
  double again_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - again_start).count();
  std::cout << "rank " << me << " next op after " << again_s << " s: " << again << std::endl;
  EXPECT_TOOL(
      again.find("the group failed earlier") != std::string::npos &&
          again.find("all_reduce #4 (4096 float32 elements) timed out") != std::string::npos,
      again);
  EXPECT_TOOL(again_s < 10.0, "the op after the failure took ", again_s,
              " s (ncclCommAbort hanging?)");
  std::this_thread::sleep_for(Millis(500));  // the other failing ranks read the store meanwhile
  std::cout.flush();
  std::_Exit(0);
}

// Runs `wait` (a wait on the others expected to fail), prints and returns its error and the
// seconds until it came.
std::pair<std::string, double> timed_failure(int me, const std::function<void()>& wait) {
  auto start = std::chrono::steady_clock::now();
  std::string msg;
  try {
    wait();
  } catch (const Error& e) {
    msg = e.what();
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "rank " << me << " after " << s << " s: " << msg << std::endl;
  return {msg, s};
}

// Runs up to `times` all_reduces of 1000 floats, one of which should fail; prints and returns the
// error ("" if none failed) and the seconds until it came.
std::pair<std::string, double> failing_all_reduces(ProcessGroup& pg, int me, int times) {
  return timed_failure(me, [&] {
    for (int k = 0; k < times; ++k) {
      Tensor t = filled<float>(me, 1000);
      pg.all_reduce(t)->synchronize();
    }
  });
}

// The last rank exits (code 3) after two collectives; the others' next collective must fail on
// its own long before the 60 s timeout (a dead peer is noticed, not waited for).
int peer_exit_test() {
  InitOptions o;
  o.backend = backend_name();
  o.timeout = Millis(60000);
  auto pg = init_process_group(o);
  int me = pg->rank(), last = pg->size() - 1;
  if (o.backend == "gloo") {  // Note [SIGPIPE and a dead peer]: a write to the dead rank
    struct sigaction now {};  // must fail with EPIPE, not end this process
    EXPECT_TOOL(::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_IGN,
                "SIGPIPE is not ignored after init_process_group(gloo)");
  }
  for (int k = 0; k < 2; ++k) {
    Tensor t = filled<float>(me, 1000);
    pg->all_reduce(t)->wait();
  }
  if (me == last) std::_Exit(3);
  const auto [msg, s] = failing_all_reduces(*pg, me, 3);
  // Without loomrun nothing records its exit: its heartbeat names it (Note [Who left]).
  EXPECT_TOOL(msg.find(str("all_reduce #3 (1000 float32 elements) on rank ", me, ": rank ", last,
                           " has left the job (its heartbeat stopped")) == 0,
              msg);
  EXPECT_TOOL(s < 10.0, "a dead peer was noticed only after ", s, " s");
  std::_Exit(0);
}
// A barrier through the store: every rank sets "<name>/<rank>" and waits for the others' keys
// (ProcessGroup::wait_for_keys, which names a rank that leaves meanwhile).
void store_barrier(ProcessGroup& pg, const std::string& name) {
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < pg.size(); ++r) {
    keys.push_back(name + "/" + std::to_string(r));
    ranks.push_back(r);
  }
  pg.store()->set(keys[size_t(pg.rank())], "here");
  pg.wait_for_keys(keys, ranks, pg.timeout(), "store barrier");
}

// The survivors' wait on the rank that leaves: all_reduce #3 ("all_reduce"), or a store barrier
// ("store"). Returns the error and the seconds until it came.
std::pair<std::string, double> wait_on_everyone(ProcessGroup& pg, int me, const std::string& in) {
  if (in == "all_reduce") return failing_all_reduces(pg, me, 1);
  return timed_failure(me, [&] { store_barrier(pg, "leave_barrier"); });
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Note [Who left]: the last rank leaves after two all-reduces as $LEAVE says: "destroy"
// (destroy_process_group, then exit 0), "exit" (std::exit(5): the exit hook records it), "vanish"
// (std::_Exit(0): no record of its own; under loomrun, the launcher's) or "kill" (SIGKILL 0.5 s
// after the others started waiting: only its heartbeat tells). The others wait on it in $LEAVE_IN
// (all_reduce #3, or "store": a store barrier) and must fail within 5 s naming it, $LEAVE_EXPECT
// opening the parenthesis that says how (for "kill": within 5 s of its death).
int leave_test() {
  InitOptions o;
  o.backend = backend_name();
  o.timeout = Millis(60000);
  auto pg = init_process_group(o);
  const int me = pg->rank(), last = pg->size() - 1;
  for (int k = 0; k < 2; ++k) {
    Tensor t = filled<float>(me, 1000);
    pg->all_reduce(t)->wait();
  }
  const char* env = std::getenv("LEAVE");
  const char* env_in = std::getenv("LEAVE_IN");
  const std::string how = env ? env : "destroy", in = env_in ? env_in : "all_reduce";
  if (me == last) {
    if (in == "store") std::this_thread::sleep_for(Millis(500));  // the others wait on it by now
    if (how == "destroy") {
      destroy_process_group();
      return 0;
    }
    if (how == "exit") std::exit(5);
    if (how == "kill") {
      if (in != "store") std::this_thread::sleep_for(Millis(500));  // the others wait on it
      pg->store()->set("test/died_at", std::to_string(wall_seconds()));
      ::kill(::getpid(), SIGKILL);
    }
    std::_Exit(0);
  }
  const auto [msg, s] = wait_on_everyone(*pg, me, in);
  const char* expect = std::getenv("LEAVE_EXPECT");
  // Others may be named too: a survivor that failed first and exited also left.
  const std::string op = in == "all_reduce"
                             ? str("all_reduce #3 (1000 float32 elements) on rank ", me, ": ")
                             : str("store barrier on rank ", me, " (waiting for rank ", last,
                                   "'s 'leave_barrier/", last, "'): "),
                    who = str("rank ", last, " has left the job (", expect ? expect : "?");
  EXPECT_TOOL(msg.find(op) == 0 && msg.find(who) != std::string::npos, "wanted '", op, "' and '",
              who, "' in: ", msg);
  if (how == "kill") {
    const double after = wall_seconds() - std::stod(pg->store()->get_string("test/died_at"));
    std::cout << "rank " << me << ": named " << after << " s after its death" << std::endl;
    EXPECT_TOOL(after < 5.0, "the killed rank was named only ", after, " s after its death");
  } else {
    EXPECT_TOOL(s < 5.0, "the rank that left was named only after ", s, " s");
  }
  std::cout.flush();
  std::_Exit(0);
}

int thread_count() {
  int n = 0;
  for (DIR* d = opendir("/proc/self/task"); d;) {
    dirent* e = readdir(d);
    if (!e) {
      closedir(d);
      break;
    }
    n += e->d_name[0] != '.';
  }
  return n;
}

// A normal end, every rank finishing: a store barrier that the last rank reaches 4.5 s late (alive:
// its heartbeat goes on, so nobody names it), then each rank calls destroy_process_group at its
// own time, rank 0 (which serves the store) last. Nothing may be said about departures (the test
// reads the output), and no thread of loom's may outlive destroy_process_group.
int finish_test() {
  // ThreadSanitizer starts a thread of its own at the first thread a program creates: start that
  // now, so that only loom's threads are counted.
  std::thread([] {}).join();
  const int before = thread_count();
  InitOptions o;
  o.backend = backend_name();
  o.timeout = Millis(60000);
  auto pg = init_process_group(o);
  const int me = pg->rank(), last = pg->size() - 1;
  for (int k = 0; k < 2; ++k) {
    Tensor t = filled<float>(me, 1000);
    pg->all_reduce(t)->wait();
  }
  if (me == last) std::this_thread::sleep_for(Millis(4500));
  store_barrier(*pg, "finish_barrier");
  Tensor t = filled<float>(me, 1000);
  pg->all_reduce(t)->wait();
  pg->barrier()->wait();
  if (me == 0) std::this_thread::sleep_for(Millis(4000));  // the others' heartbeats have stopped
  pg.reset();
  destroy_process_group();
  const int after = thread_count();
  EXPECT_TOOL(after == before, "rank ", me, ": ", after, " threads after destroy_process_group, ",
              before, " before init_process_group");
  std::cout << "rank " << me << ": finished (" << before << " threads before and after)"
            << std::endl;
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    JobEnv env = job_env();
    const char* backend = std::getenv("LOOM_TEST_BACKEND");
    // The device init_process_group picks for NCCL (LOCAL_RANK % device_count()).
    g_device = backend && std::string(backend) == "nccl"
                   ? cuda_device(env.local_rank % std::max(1, cuda::device_count()))
                   : kCPU;
    if (mode == "collectives") return collectives();
    if (mode == "timeout") return timeout_test();
    if (mode == "peer_exit") return peer_exit_test();
    if (mode == "leave") return leave_test();
    if (mode == "finish") return finish_test();
    std::cerr << "dist_tool: unknown mode " << mode << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "rank " << (std::getenv("RANK") ? std::getenv("RANK") : "?")
              << " FAILED: " << e.what() << std::endl;
    // Leave at once: a normal exit would tear the communicators down, which can wait for peers
    // that are themselves waiting in a collective for this rank.
    std::cout.flush();
    std::_Exit(1);
  }
}
