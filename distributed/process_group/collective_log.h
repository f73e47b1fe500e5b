// CollectiveLog: each rank's record of its collectives (op, sequence number, size, time), kept in
// the group's store so a rank whose collective timed out can say where the missing ranks are.
// It also keeps this rank's heartbeat and says who left the job (Note [Who left]).
// Leaves out: detecting the timeout (the backends do) and aborting communicators.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "distributed/store/store.h"

namespace loom::distributed {

// One op as the log knows it. seq counts this group's collectives from 1 (0 for send/recv).
struct OpRecord {
  std::string op;
  uint64_t seq = 0;
  int64_t numel = 0;
  DType dtype = DType::F32;
  int peer = -1;                 // send/recv: the other rank
  std::string describe() const;  // "all_reduce #17 (4096 float32 elements)"
};

// Note [Timeout errors]
// Each rank publishes "<seq> <op> <numel> <dtype>" under the group's key "progress/<rank>" from a
// background thread (at most every 50 ms, on its own store connection), so recording costs a
// mutex and a string per collective. When a collective times out, the rank publishes its own
// record, waits a moment for the others' writers, reads every member's record and names the ranks
// whose sequence number is below its own, with their last collective:
//   all_reduce #17 (4096 float32 elements) timed out after 5.0 s on rank 0: rank 2 has not
//   reached it (its last collective: all_reduce #16)
// If every rank reached it, the message says so (a transport failure or a mismatched op); if the
// store cannot be read (rank 0, which serves it, is gone), the message says that instead.
class CollectiveLog {
 public:
  // store may be null (a world of one): nothing is published.
  CollectiveLog(std::shared_ptr<Store> store, int rank, int size);
  ~CollectiveLog();
  CollectiveLog(const CollectiveLog&) = delete;
  CollectiveLog& operator=(const CollectiveLog&) = delete;

  OpRecord begin(const char* op, int64_t numel, DType dtype);  // a collective: next seq
  OpRecord point_to_point(const char* op, int64_t numel, DType dtype, int peer);
  // The message for `rec` having failed to finish within `waited` on this rank.
  std::string timeout_message(const OpRecord& rec, std::chrono::milliseconds waited);

  // Note [Who left]
  // A rank that leaves the job records it under "left/<rank>" (destroy_process_group, or the
  // process exiting with the group still up: `how` says which), and loomrun records each worker's
  // end under "exit/<rank>" ("exit status 0", "killed by signal 9"; launcher/worker_group.cpp).
  // A rank that vanishes with neither (SIGKILL without loomrun, the OOM killer, a host that went
  // away) is seen by its heartbeat: the publisher thread adds 1 to "alive/<rank>" every second
  // (kHeartbeat) while the group is up, and record_departure stops it (no thread outlives
  // destroy_process_group). Counters, not timestamps: the reader judges by its own clock how long
  // a count has not moved, so hosts need no common time. A rank is named once its count has not
  // advanced for kHeartbeatStale (3 s, three missed beats) of the reader's watching, and the
  // reader records that under "gone/<rank>", so that a peer which starts looking later (its own
  // failure came from this rank's) names it at once instead of watching 3 s more. Heartbeats are
  // read only where someone already waits on the rank (a failed collective, the NCCL watchdog, a
  // watched store wait): a job that runs well pays one store write a second per rank and group.
  // departures() reads the records for every other rank (and the heartbeats every
  // kHeartbeatRead) until one names someone or `wait` ends (a closed connection is often seen
  // before the record lands, and a heartbeat takes kHeartbeatStale to go quiet), and names them
  // with their last collective from "progress/<rank>": exact when the rank recorded its own
  // departure (it publishes its progress first), else the last one its publisher wrote (up to
  // 50 ms behind):
  //   rank 1 has left the job (called destroy_process_group after its all_reduce #37)
  //   rank 1 has left the job (exit status 0; last seen in all_reduce #37)
  //   rank 1 has left the job (its heartbeat stopped: rank 0 saw none for 3.2 s; last seen in
  //   all_reduce #37; killed, or its host is gone)
  // "" when nobody is recorded as gone (or the store is unreachable). A rank that never beat (it
  // has not built the group yet) is never named by its heartbeat: rendezvous names it as absent.
  // A rank stopped whole (SIGSTOP, a debugger) also stops beating and is named after 3 s by a
  // peer that waits on it; a live rank busy in a long step is not (its heartbeat is a thread).
  // Only watched time counts: when more than kHeartbeatGap passed between two of the reader's own
  // reads (it was not waiting on anyone, or its machine stalled: a paused VM, a swapped-out
  // process, during which the watched rank could not beat either), the count it saw last is no
  // evidence, and its 3 s start again.
  static constexpr std::chrono::milliseconds kHeartbeat{1000}, kHeartbeatStale{3000},
      kHeartbeatRead{400}, kHeartbeatGap{1500};
  void record_departure(const std::string& how);
  std::string departures(std::chrono::milliseconds wait);

  // Waits until every keys[i] exists in `store` (set by rank ranks[i] of this group; -1: any
  // rank), at most `timeout` in all, looking every kStoreWaitSlice (0.5 s) for a departure record
  // or a stopped heartbeat of the rank whose key is missing: fails naming it, as "<what> on rank
  // R: rank 2 has left the job (...)", instead of waiting out the timeout. Past the timeout, the
  // store's own error names the missing keys.
  static constexpr std::chrono::milliseconds kStoreWaitSlice{500};
  void wait_for_keys(Store& store, const std::vector<std::string>& keys,
                     const std::vector<int>& ranks, std::chrono::milliseconds timeout,
                     const std::string& what);

 private:
  void publisher();
  void stop_publisher();
  // How rank r left ("" if nothing says it did): its record, else a heartbeat that stopped (read
  // when kHeartbeatRead has passed since the last read of r's). watch_mu_ held.
  std::string departure_of(int r);
  std::string stopped_heartbeat(int r);
  std::shared_ptr<Store> store_;   // the publisher's own connection
  std::shared_ptr<Store> reader_;  // for timeout_message
  int rank_, size_;
  std::mutex mu_;
  std::condition_variable cv_;
  OpRecord last_;
  uint64_t published_seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
  // What this rank has seen of each member's heartbeat (Note [Who left]).
  struct Beat {
    int64_t count = -1;                                    // the last count read (-1: never read)
    std::chrono::steady_clock::time_point since, read_at;  // when it was first seen; last read
  };
  std::mutex watch_mu_;  // departures() runs on several threads (Gloo's two workers, NCCL's
                         // watchdog, a store wait); guards beats_ and the reads behind it
  std::vector<Beat> beats_;
};

}  // namespace loom::distributed
