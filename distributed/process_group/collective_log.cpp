// CollectiveLog: publishing each rank's progress and heartbeat, explaining timeouts (Note [Timeout
// errors]) and naming the ranks that left (Note [Who left]). Leaves out: the transports.
#include "distributed/process_group/collective_log.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace loom::distributed {

namespace {
std::string alive_key(int rank) { return "alive/" + std::to_string(rank); }
}  // namespace

std::string OpRecord::describe() const {
  std::string what = str(numel, " ", dtype_name(dtype), " element", numel == 1 ? "" : "s");
  if (op == "barrier") return str("barrier #", seq);
  if (op == "graph_replay") return str("CUDA graph replay #", seq, " (its captured collectives)");
  if (seq == 0)
    return str(op, peer >= 0 ? (op == "send" ? " to rank " : " from rank ") : "",
               peer >= 0 ? std::to_string(peer) : "", " (", what, ")");
  return str(op, " #", seq, " (", what, ")");
}

CollectiveLog::CollectiveLog(std::shared_ptr<Store> store, int rank, int size)
    : rank_(rank), size_(size) {
  if (!store || size <= 1) return;
  store_ = store->clone();
  reader_ = store->clone();
  beats_.resize(size_t(size));
  try {
    store_->add(alive_key(rank_), 1);  // the first beat, before anyone can wait on this rank
  } catch (const std::exception&) {
    // The store is gone: the group's rendezvous fails next, with the reason.
  }
  thread_ = std::thread([this] { publisher(); });
}

CollectiveLog::~CollectiveLog() { stop_publisher(); }

void CollectiveLog::stop_publisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

OpRecord CollectiveLog::begin(const char* op, int64_t numel, DType dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = OpRecord{op, last_.seq + 1, numel, dtype, -1};
  cv_.notify_all();
  return last_;
}

OpRecord CollectiveLog::point_to_point(const char* op, int64_t numel, DType dtype, int peer) {
  return OpRecord{op, 0, numel, dtype, peer};
}

namespace {
using Clock = std::chrono::steady_clock;

std::string encode(const OpRecord& r) {
  return str(r.seq, " ", r.op, " ", r.numel, " ", dtype_name(r.dtype));
}
}  // namespace

// Publishes the last collective when it changes (at most 20 writes a second) and beats every
// kHeartbeat (Note [Who left]), until stop_.
void CollectiveLog::publisher() {
  std::unique_lock<std::mutex> lock(mu_);
  auto next_beat = Clock::now() + kHeartbeat;
  for (;;) {
    cv_.wait_until(lock, next_beat, [&] { return stop_ || last_.seq != published_seq_; });
    if (stop_) return;
    const bool progress = last_.seq != published_seq_;
    const OpRecord rec = last_;
    lock.unlock();
    try {
      if (progress) store_->set("progress/" + std::to_string(rank_), encode(rec));
      if (Clock::now() >= next_beat) {
        store_->add(alive_key(rank_), 1);
        next_beat = Clock::now() + kHeartbeat;
      }
    } catch (const std::exception&) {
      // The store is gone (rank 0 exited): nothing left to tell; the job is ending anyway.
      lock.lock();
      stop_ = true;
      return;
    }
    lock.lock();
    published_seq_ = rec.seq;
    // Batch: the next record waits 50 ms (a stop does not).
    if (progress) cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_; });
  }
}

std::string CollectiveLog::timeout_message(const OpRecord& rec, std::chrono::milliseconds waited) {
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << rec.describe() << " timed out after " << double(waited.count()) / 1000.0
     << " s on rank " << rank_;
  if (!reader_ || rec.seq == 0) return os.str();
  try {
    reader_->set("progress/" + std::to_string(rank_), encode(rec));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the others' writers land
    std::vector<int> behind;
    std::vector<std::string> where;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      std::string key = "progress/" + std::to_string(r);
      if (!reader_->check({key})) {
        behind.push_back(r);
        where.push_back("no collective yet");
        continue;
      }
      std::istringstream in(reader_->get_string(key, std::chrono::milliseconds(2000)));
      OpRecord o;
      in >> o.seq >> o.op;
      if (o.seq >= rec.seq) continue;
      behind.push_back(r);
      where.push_back(str("its last collective: ", o.op, " #", o.seq));
    }
    if (behind.empty()) {
      os << ": every rank reached it (a peer failed, or the ranks called different collectives)";
    } else if (behind.size() == 1) {
      os << ": rank " << behind[0] << " has not reached it (" << where[0] << ")";
    } else {
      os << ": ranks ";
      for (size_t i = 0; i < behind.size(); ++i) os << (i ? ", " : "") << behind[i];
      os << " have not reached it (";
      for (size_t i = 0; i < behind.size(); ++i)
        os << (i ? "; " : "") << "rank " << behind[i] << ": " << where[i];
      os << ")";
    }
  } catch (const std::exception& e) {
    os << " (the other ranks' progress could not be read from the store: " << e.what() << ")";
  }
  return os.str();
}

void CollectiveLog::record_departure(const std::string& how) {
  if (!reader_) return;
  stop_publisher();  // its heartbeat ends here, and no older progress can land after the final one
  try {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reader_->set("progress/" + std::to_string(rank_), encode(last_));  // the final word on it
    }
    reader_->set("left/" + std::to_string(rank_), how);
  } catch (const std::exception&) {
    // The store is gone (rank 0, which serves it, left first): nobody is left to tell.
  }
}

namespace {
// A rank's last published collective, "all_reduce #37", or "" before any.
std::string last_collective(Store& store, int r) {
  const std::string key = "progress/" + std::to_string(r);
  if (!store.check({key})) return "";
  std::istringstream in(store.get_string(key, std::chrono::milliseconds(2000)));
  OpRecord o;
  in >> o.seq >> o.op;
  return o.seq == 0 ? "" : str(o.op, " #", o.seq);
}

// How rank r left, or "" when nothing says it did: loomrun's record ("exit/<r>"), its own
// ("left/<r>", with its exact last collective), or a peer's that saw its heartbeat stop
// ("gone/<r>"); the others with the last collective it published (up to 50 ms behind).
std::string recorded_departure(Store& store, int r) {
  const std::string rs = std::to_string(r);
  std::string key;
  for (const char* k : {"exit/", "left/", "gone/"})
    if (store.check({k + rs})) {
      key = k + rs;
      break;
    }
  if (key.empty()) return "";
  const std::string how = store.get_string(key, std::chrono::milliseconds(2000));
  const std::string last = last_collective(store, r);
  if (key[0] == 'l')
    return str(how, last.empty() ? " before any collective" : " after its " + last);
  const std::string seen = last.empty() ? "; no collective seen from it" : "; last seen in " + last;
  return str(how, seen, key[0] == 'g' ? "; killed, or its host is gone" : "");
}
}  // namespace

// Note [Who left]: named once r's count has not moved for kHeartbeatStale of this rank's watching
// (reads at most kHeartbeatGap apart), and recorded under "gone/<r>" for the others.
std::string CollectiveLog::stopped_heartbeat(int r) {
  Beat& b = beats_[size_t(r)];
  const auto now = Clock::now();
  if (now - b.read_at < kHeartbeatRead) return "";
  const bool watched = now - b.read_at <= kHeartbeatGap;  // else only now looking again
  b.read_at = now;
  const int64_t count = reader_->add(alive_key(r), 0);
  if (count == 0) return "";  // it never beat: not in the group yet
  if (count != b.count || !watched) {
    b.count = count;
    b.since = now;
    return "";
  }
  const double quiet = std::chrono::duration<double>(now - b.since).count();
  if (quiet < std::chrono::duration<double>(kHeartbeatStale).count()) return "";
  // Told to everyone (the first to see it wins): a peer that starts looking only now, say when
  // this rank's own failure reaches it, need not watch for 3 s more.
  std::ostringstream os;
  os.precision(1);
  os << std::fixed << "its heartbeat stopped: rank " << rank_ << " saw none for " << quiet << " s";
  const std::string how = os.str(), key = "gone/" + std::to_string(r);
  reader_->compare_set(key, Bytes(), Bytes(how.begin(), how.end()));
  return recorded_departure(*reader_, r);
}

std::string CollectiveLog::departure_of(int r) {
  std::string how = recorded_departure(*reader_, r);
  if (how.empty()) how = stopped_heartbeat(r);
  return how.empty() ? "" : str("rank ", r, " has left the job (", how, ")");
}

std::string CollectiveLog::departures(std::chrono::milliseconds wait) {
  if (!reader_) return "";
  const auto deadline = Clock::now() + wait;
  std::lock_guard<std::mutex> lock(watch_mu_);
  try {
    for (;;) {
      std::string out;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const std::string gone = departure_of(r);
        if (!gone.empty()) out += str(out.empty() ? "" : "; ", gone);
      }
      if (!out.empty() || Clock::now() >= deadline) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
    return "";  // the store is gone: the caller's own message stands
  }
}

void CollectiveLog::wait_for_keys(Store& store, const std::vector<std::string>& keys,
                                  const std::vector<int>& ranks, std::chrono::milliseconds timeout,
                                  const std::string& what) {
  LOOM_CHECK(keys.size() == ranks.size(), what, ": wait_for_keys got ", keys.size(), " keys and ",
             ranks.size(), " ranks");
  for (int r : ranks)
    LOOM_CHECK(r >= -1 && r < size_, what, ": wait_for_keys: rank ", r,
               " is not a member of this group of ", size_, " (-1: any member)");
  const auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < keys.size(); ++i) {  // one at a time: each look is at one rank
    for (;;) {
      if (store.check({keys[i]})) break;  // throws if the store is gone
      std::string gone;
      if (reader_ && ranks[i] >= 0 && ranks[i] != rank_) {
        std::lock_guard<std::mutex> lock(watch_mu_);
        gone = departure_of(ranks[i]);
      } else if (reader_ && ranks[i] < 0) {
        gone = departures(std::chrono::milliseconds(0));
      }
      // A rank may write its key and then leave between the look at the key and the look at
      // the departures (DDP's layout check: a rank that saw the mismatch fails at once): its key
      // is there, so look once more before naming it.
      if (!gone.empty() && store.check({keys[i]})) break;
      LOOM_CHECK(gone.empty(), what, " on rank ", rank_, " (waiting for ",
                 ranks[i] >= 0 ? str("rank ", ranks[i], "'s ") : std::string(), "'", keys[i],
                 "'): ", gone);
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= kStoreWaitSlice) {
        store.wait({keys[i]}, std::max(left, std::chrono::milliseconds(1)));  // its own error
        break;
      }
      try {
        store.wait({keys[i]}, kStoreWaitSlice);
        break;
      } catch (const Error&) {
        // The slice ran out (or the store went away: check() above says so next).
      }
    }
  }
}

}  // namespace loom::distributed
