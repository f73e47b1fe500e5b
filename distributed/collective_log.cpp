// CollectiveLog: publishing each rank's progress and explaining timeouts (Note [Timeout errors]).
#include "distributed/collective_log.h"

#include <sstream>
#include <vector>

#include "core/error.h"

namespace loom::distributed {

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
  thread_ = std::thread([this] { publisher(); });
}

CollectiveLog::~CollectiveLog() {
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
std::string encode(const OpRecord& r) {
  return str(r.seq, " ", r.op, " ", r.numel, " ", dtype_name(r.dtype));
}
}  // namespace

void CollectiveLog::publisher() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || last_.seq != published_seq_; });
    if (stop_) return;
    OpRecord rec = last_;
    lock.unlock();
    try {
      store_->set("progress/" + std::to_string(rank_), encode(rec));
    } catch (const std::exception&) {
      // The store is gone (rank 0 exited): nothing left to tell; the job is ending anyway.
      lock.lock();
      published_seq_ = rec.seq;
      stop_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // batch: at most 20 writes/s
    lock.lock();
    published_seq_ = rec.seq;
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

// How rank r left, or "" when nothing says it did. Its own record comes with its exact last
// collective; loomrun's alone with the last one it published (up to 50 ms behind).
std::string departure_of(Store& store, int r) {
  const std::string exit_key = "exit/" + std::to_string(r), left_key = "left/" + std::to_string(r);
  const bool by_launcher = store.check({exit_key}), by_itself = store.check({left_key});
  if (!by_launcher && !by_itself) return "";
  const auto t = std::chrono::milliseconds(2000);
  const std::string how = store.get_string(by_launcher ? exit_key : left_key, t);
  const std::string last = last_collective(store, r);
  if (by_itself) return str(how, last.empty() ? " before any collective" : " after its " + last);
  return str(how, last.empty() ? "; no collective seen from it" : "; last seen in " + last);
}
}  // namespace

std::string CollectiveLog::departures(std::chrono::milliseconds wait) {
  if (!reader_) return "";
  const auto deadline = std::chrono::steady_clock::now() + wait;
  try {
    for (;;) {
      std::string out;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const std::string how = departure_of(*reader_, r);
        if (!how.empty())
          out += str(out.empty() ? "" : "; ", "rank ", r, " has left the job (", how, ")");
      }
      if (!out.empty() || std::chrono::steady_clock::now() >= deadline) return out;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  } catch (const std::exception&) {
    return "";  // the store is gone: the caller's own message stands
  }
}

}  // namespace loom::distributed
