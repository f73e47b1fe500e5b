// How the loomruns of a many-node job meet: node 0 serves a TCP store, every node's loomrun joins
// it per attempt, learns its first rank and the world size, and watches a "failed" key so that a
// failure on one node stops every node (Note [Nodes]).
// Leaves out: the workers (worker_group.h); the store itself (distributed/store/tcp_store.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace loom::distributed {
class Store;
class TCPStore;
}  // namespace loom::distributed

namespace loom::distributed::launcher {

struct NodeAssignment {
  int first_rank = 0;  // this node's local rank 0 has this global rank
  int world_size = 0;  // the sum of every node's nproc_per_node
};

class NodeRendezvous {
 public:
  // Node 0 serves the store on host:port (bound to host); every node connects, retrying until
  // `timeout` (the join timeout). Node 0 reports a node whose heartbeat stopped for `lost_after`.
  NodeRendezvous(const std::string& host, int port, int nnodes, int node_rank,
                 std::chrono::milliseconds timeout,
                 std::chrono::milliseconds lost_after = std::chrono::seconds(15));
  ~NodeRendezvous();

  // Blocks until all nodes joined `attempt` (an error naming the missing nodes after the
  // timeout). Every node says how many workers it runs and its max_restarts (which must agree).
  // `cancelled` is asked about once a second; when it says true, join throws loom::Error.
  NodeAssignment join(int attempt, int nproc, int max_restarts,
                      const std::function<bool()>& cancelled);

  // Called by the supervision loop every ~200 ms: the reason when some node reported a failure
  // for `attempt` (or a node stopped answering, or the store is gone); also sends this node's
  // heartbeat.
  std::optional<std::string> failure(int attempt);

  // This node failed: tell the others (the first report of an attempt wins).
  void report_failure(int attempt, const std::string& reason);
  // This node's workers are stopped after a failure (of any node). On node 0, when no restart
  // follows, waits (bounded) until every node said so before the store goes away.
  void stopped(int attempt, bool last_attempt, double grace_seconds);

  // This node's workers all succeeded: waits until every node's did. Returns a failure reason if
  // another node failed meanwhile (then this node takes part in the restart, or exits non-zero).
  // When `cancelled` says true (asked every 0.1 s), stops waiting and returns "cancelled".
  std::optional<std::string> finish(int attempt, const std::function<bool()>& cancelled);

  int port() const;

 private:
  std::string key(int attempt, const std::string& what) const;
  void heartbeat();
  std::optional<std::string> lost_node();

  int nnodes_, node_rank_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds lost_after_;  // node 0: a node silent this long has failed
  int lost_nodes_ = 0;                    // node 0: nodes of this attempt found lost
  std::shared_ptr<TCPStore> store_;
  std::chrono::steady_clock::time_point next_beat_;
  std::vector<int64_t> last_beat_;  // node 0: each node's counter
  std::vector<std::chrono::steady_clock::time_point> beat_seen_;
};

}  // namespace loom::distributed::launcher
