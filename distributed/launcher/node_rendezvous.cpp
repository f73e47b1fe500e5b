// Rendezvous, failure broadcast and heartbeats of the loomruns of a job; see node_rendezvous.h.
#include "distributed/launcher/node_rendezvous.h"

#include <unistd.h>

#include <sstream>
#include <thread>

#include "core/error.h"
#include "distributed/store/tcp_store.h"

namespace loom::distributed::launcher {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Note [Nodes]
// Keys (all under "loomrun/"): attempt_K/node_N = "nproc max_restarts hostname" (join; every node
// waits for all N of them), attempt_K/failed = why (the first node to fail writes it with
// compare_set), attempt_K/done and attempt_K/stopped = counters, beat/node_N = a counter each
// loomrun bumps every second. Node 0 watches the beats: a node whose counter has not moved for
// --node_timeout is reported failed (its loomrun was killed; its workers died with it through
// PR_SET_PDEATHSIG). The other nodes notice node 0's loss as a store error. A node whose workers
// all succeeded waits for every node to be done, so that no node leaves while another might still
// restart; node 0 serves the store and so leaves last.
constexpr auto kBeatEvery = milliseconds(1000);

static std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

NodeRendezvous::NodeRendezvous(const std::string& host, int port, int nnodes, int node_rank,
                               milliseconds timeout, milliseconds lost_after)
    : nnodes_(nnodes),
      node_rank_(node_rank),
      timeout_(timeout),
      lost_after_(lost_after),
      last_beat_(static_cast<size_t>(nnodes), -1),
      beat_seen_(static_cast<size_t>(nnodes), Clock::now()) {
  TCPStoreOptions opts;
  opts.is_server = node_rank == 0;
  opts.timeout = timeout;
  store_ = std::make_shared<TCPStore>(host, port, opts);
}

NodeRendezvous::~NodeRendezvous() = default;

int NodeRendezvous::port() const { return store_->port(); }

std::string NodeRendezvous::key(int attempt, const std::string& what) const {
  return "loomrun/attempt_" + std::to_string(attempt) + "/" + what;
}

NodeAssignment NodeRendezvous::join(int attempt, int nproc, int max_restarts,
                                    const std::function<bool()>& cancelled) {
  std::ostringstream me;
  me << nproc << ' ' << max_restarts << ' ' << hostname();
  store_->set(key(attempt, "node_" + std::to_string(node_rank_)), me.str());
  std::vector<std::string> keys;
  for (int n = 0; n < nnodes_; ++n) keys.push_back(key(attempt, "node_" + std::to_string(n)));
  const auto deadline = Clock::now() + timeout_;
  for (;;) {  // wait in slices, so that loomrun answers Ctrl-C while it waits for the others
    try {
      store_->wait(keys, milliseconds(1000));
      break;
    } catch (const Error&) {
      LOOM_CHECK(!(cancelled && cancelled()), "loomrun: interrupted while waiting for the nodes");
      if (Clock::now() < deadline) continue;
      std::string missing;
      for (int n = 0; n < nnodes_; ++n)
        if (!store_->check({keys[static_cast<size_t>(n)]})) missing += " " + std::to_string(n);
      LOOM_FAIL("loomrun: node ", node_rank_, ": nodes", missing, " did not join attempt ", attempt,
                " within ", timeout_.count() / 1000.0, " s (--rdzv_timeout)");
    }
  }
  std::vector<std::string> records;
  for (const auto& k : keys) records.push_back(store_->get_string(k, timeout_));
  // Node 0 may leave (on a mismatch below) only once every node has read the records: the store
  // goes away with it.
  store_->add(key(attempt, "read"), 1);
  if (node_rank_ == 0) {
    auto deadline = Clock::now() + milliseconds(5000);
    while (Clock::now() < deadline && store_->add(key(attempt, "read"), 0) < nnodes_)
      std::this_thread::sleep_for(milliseconds(10));
  }
  NodeAssignment a;
  int my_restarts = max_restarts;
  for (int n = 0; n < nnodes_; ++n) {
    std::istringstream in(records[static_cast<size_t>(n)]);
    int np = 0, mr = 0;
    std::string host;
    in >> np >> mr >> host;
    LOOM_CHECK(np >= 1, "loomrun: node ", n, " sent a bad join record '", in.str(), "'");
    LOOM_CHECK(mr == my_restarts, "loomrun: --max_restarts differs between nodes: node ",
               node_rank_, " has ", my_restarts, ", node ", n, " (", host, ") has ", mr);
    if (n < node_rank_) a.first_rank += np;
    a.world_size += np;
  }
  // Everyone's heartbeat starts counting now.
  for (auto& t : beat_seen_) t = Clock::now();
  lost_nodes_ = 0;
  std::fill(last_beat_.begin(), last_beat_.end(), -1);
  heartbeat();
  return a;
}

void NodeRendezvous::heartbeat() {
  auto now = Clock::now();
  if (now < next_beat_) return;
  next_beat_ = now + kBeatEvery;
  store_->add("loomrun/beat/node_" + std::to_string(node_rank_), 1);
}

std::optional<std::string> NodeRendezvous::lost_node() {
  if (node_rank_ != 0) return std::nullopt;
  auto now = Clock::now();
  for (int n = 1; n < nnodes_; ++n) {
    auto i = static_cast<size_t>(n);
    int64_t beat = store_->add("loomrun/beat/node_" + std::to_string(n), 0);
    if (beat != last_beat_[i]) {
      last_beat_[i] = beat;
      beat_seen_[i] = now;
    } else if (now - beat_seen_[i] > lost_after_) {
      lost_nodes_ = 1;  // reported once: the attempt stops at this
      return "node " + std::to_string(n) + " stopped answering (no heartbeat for " +
             str(lost_after_.count() / 1000.0) + " s: its loomrun is gone)";
    }
  }
  return std::nullopt;
}

std::optional<std::string> NodeRendezvous::failure(int attempt) {
  try {
    heartbeat();
    std::string failed = key(attempt, "failed");
    if (store_->check({failed})) return store_->get_string(failed, timeout_);
    if (auto lost = lost_node()) {
      report_failure(attempt, *lost);
      return lost;
    }
    return std::nullopt;
  } catch (const std::exception& e) {
    return "lost the store on node 0 (its loomrun is gone?): " + std::string(e.what());
  }
}

void NodeRendezvous::report_failure(int attempt, const std::string& reason) {
  try {
    std::string r = reason;
    store_->compare_set(key(attempt, "failed"), Bytes{}, Bytes(r.begin(), r.end()));
  } catch (const std::exception&) {
    // The store is gone (node 0 died): the other nodes find that out on their own.
  }
}

void NodeRendezvous::stopped(int attempt, bool last_attempt, double grace_seconds) {
  try {
    store_->add(key(attempt, "stopped"), 1);
    if (node_rank_ != 0 || !last_attempt) return;
    // Node 0 keeps the store up until the others have read why and stopped (bounded).
    // (The others notice within 0.2 s and stop within the grace period; a lost node never will.)
    auto deadline = Clock::now() + milliseconds(static_cast<int64_t>(grace_seconds * 1000) + 2000);
    while (Clock::now() < deadline &&
           store_->add(key(attempt, "stopped"), 0) < nnodes_ - lost_nodes_)
      std::this_thread::sleep_for(milliseconds(50));
  } catch (const std::exception&) {
  }
}

std::optional<std::string> NodeRendezvous::finish(int attempt,
                                                  const std::function<bool()>& cancelled) {
  try {
    store_->add(key(attempt, "done"), 1);
    for (;;) {
      if (store_->add(key(attempt, "done"), 0) >= nnodes_) break;
      if (auto why = failure(attempt)) return why;
      if (cancelled && cancelled()) return "cancelled";
      std::this_thread::sleep_for(milliseconds(100));
    }
    store_->add(key(attempt, "left"), 1);
    if (node_rank_ == 0) {  // serve until every node has seen "done" (bounded)
      auto deadline = Clock::now() + milliseconds(5000);
      while (Clock::now() < deadline && store_->add(key(attempt, "left"), 0) < nnodes_)
        std::this_thread::sleep_for(milliseconds(20));
    }
    return std::nullopt;
  } catch (const std::exception& e) {
    return "lost the store on node 0 (its loomrun is gone?): " + std::string(e.what());
  }
}

}  // namespace loom::distributed::launcher
