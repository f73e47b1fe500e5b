// CollectiveLog: each rank's record of its collectives (op, sequence number, size, time), kept in
// the group's store so a rank whose collective timed out can say where the missing ranks are.
// Leaves out: detecting the timeout (the backends do) and aborting communicators.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

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
  // departures() reads them for every other rank, waiting up to `wait` for the first to appear
  // (a closed connection is often seen before the record lands), and names them with their last
  // collective from "progress/<rank>": exact when the rank recorded its own departure (it
  // publishes its progress first), else the last one its publisher wrote (up to 50 ms behind):
  //   rank 1 has left the job (called destroy_process_group after its all_reduce #37)
  //   rank 1 has left the job (exit status 0; last seen in all_reduce #37)
  // "" when nobody is recorded as gone (or the store is unreachable). A rank that vanishes without
  // loomrun and without an orderly exit leaves no record; its peers' errors then say "did a peer
  // exit?" as before.
  void record_departure(const std::string& how);
  std::string departures(std::chrono::milliseconds wait);

 private:
  void publisher();
  std::shared_ptr<Store> store_;   // the publisher's own connection
  std::shared_ptr<Store> reader_;  // for timeout_message
  int rank_, size_;
  std::mutex mu_;
  std::condition_variable cv_;
  OpRecord last_;
  uint64_t published_seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace loom::distributed
