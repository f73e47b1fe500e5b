// NcclProcessGroup: the CUDA backend: one NCCL communicator per group on one device, ops on the
// group's own stream ordered against the compute stream by events, a watchdog that
// aborts the communicator when an op outlives the timeout or NCCL reports an async error, and
// collectives captured into CUDA graphs (their replays watched as ops).
// Leaves out: several devices per process, and NCCL's non-blocking communicator mode.
#pragma once

#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/process_group/process_group.h"

namespace loom::distributed {

class NcclWork;

// Note [NCCL and NVLS]
// NVLink SHARP (multicast) stays off: before the first communicator loom sets
// NCCL_NVLS_ENABLE=0 in its own environment (overriding any other value, never to 1), and every
// process it starts inherits it. Multicast objects can take a shared machine's GPUs out of
// service, and loom's collectives do not need them.
void ensure_nvls_disabled();

class NcclProcessGroup : public ProcessGroup {
 public:
  // device: the CUDA device of this rank (tensors must live there). Rank 0 makes the unique id
  // and puts it in the store under "nccl_id"; every rank then joins the communicator. The
  // destructor waits for the outstanding ops (at most the timeout, Note [NCCL teardown]).
  NcclProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout, int device);
  ~NcclProcessGroup() override;
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
  // Collectives launched under a CUDA graph capture join the graph (Note [NCCL under graph
  // capture] in nccl_process_group.cpp); each replay is then watched as one op.
  bool collectives_capturable() const override { return true; }
  std::shared_ptr<Work> watch_graph_replay() override;

 protected:
#define LOOM_PROCESS_GROUP_METHOD(name, params) std::shared_ptr<Work> name params override;
#include "distributed/process_group/process_group_methods.inc"
#undef LOOM_PROCESS_GROUP_METHOD
  void check_device(const char* op, const Tensor& t) const override;

 private:
  friend class NcclWork;
  struct Comm;    // the ncclComm_t and the group's stream, behind a pointer (no nccl.h here)
  struct Health;  // shared with the works: set once the group broke (Note [NCCL failure order])
  template <typename Body>
  std::shared_ptr<Work> launch(const OpRecord& rec, std::initializer_list<Tensor> tensors,
                               bool host_blocking, Body&& body);
  void watchdog();
  void fail_all(const std::string& msg);  // mu_ held
  bool departure_due();                   // mu_ held; Note [Who left]
  std::chrono::steady_clock::time_point last_departure_check_{};

  int device_;
  std::unique_ptr<Comm> comm_;
  std::shared_ptr<Health> health_;
  Tensor barrier_buf_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::list<std::shared_ptr<NcclWork>> outstanding_;
  std::string broken_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace loom::distributed
