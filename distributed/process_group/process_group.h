// ProcessGroup: collectives over a set of processes (all_reduce, broadcast, all_gather,
// reduce_scatter, barrier, send/recv), each returning a Work: the interface every backend
// implements and the checks every call passes first. Leaves out: the transports
// (local_process_group.h, gloo_process_group.h, nccl_process_group.h), starting a job and making
// groups (world.h), and DDP (distributed/ddp/ddp.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/collective_log.h"
#include "distributed/process_group/work.h"
#include "distributed/store/store.h"

namespace loom::distributed {

// Note [Reductions and dtypes]
// Every loom dtype works with every op that moves data. Reductions: Sum, Max, Min, Product on
// every dtype; Avg only on floating dtypes (an error naming the dtype otherwise: an integer mean
// would silently truncate). On bool, Sum and Max are logical or, Product and Min logical and.
// f16/bf16 are reduced in float and rounded once per step (Gloo) or natively (NCCL).
enum class ReduceOp { Sum, Avg, Max, Min, Product };
const char* reduce_op_name(ReduceOp op);

// Note [Collective semantics]
// Every member calls the same collectives in the same order with matching sizes (the sequence
// number names a collective). Tensors are contiguous, on the backend's device (Gloo: CPU; NCCL:
// the group's CUDA device), any size including 0 elements; results are written in place.
// Misuse is an error naming the op, the tensor (dtype, shape, device) and what is wrong.
// all_gather: out holds size() * in.numel() elements, rank-major (rank r's in at r * in.numel()).
// reduce_scatter: in holds size() * out.numel() elements; rank r gets the reduction of chunk r.
// send/recv match by (peer, tag); they are not collectives and have no sequence number.
// Every op has the group's timeout; on timeout it fails with Note [Timeout errors]'s message and
// the group is broken: every later op fails at once with the same error.
class ProcessGroup {
 public:
  ProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout);
  virtual ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;  // "gloo", "nccl", "local" (world of one)
  Millis timeout() const { return timeout_; }
  // This group's members as ranks of the world (empty for a group made without new_group).
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  void set_world_ranks(std::vector<int> r) { world_ranks_ = std::move(r); }
  const std::shared_ptr<Store>& store() const { return store_; }

  std::shared_ptr<Work> all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> broadcast(Tensor& t, int root);
  std::shared_ptr<Work> all_gather(Tensor& out, const Tensor& in);
  std::shared_ptr<Work> reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum);
  std::shared_ptr<Work> barrier();
  std::shared_ptr<Work> send(const Tensor& t, int dst, int tag = 0);
  std::shared_ptr<Work> recv(Tensor& t, int src, int tag = 0);
  // CUDA graphs (Note [NCCL under graph capture] in nccl_process_group.cpp): whether collectives
  // issued while the current stream is being captured become part of the graph (NCCL: yes; Gloo
  // runs them on host threads over CPU tensors, and a world of one has none).
  virtual bool collectives_capturable() const { return false; }
  // Call after launching a CUDA graph that holds this group's collectives on the current stream:
  // the replay is watched as one op (the collective timeout, a peer that left). Null when this
  // backend's collectives cannot be captured.
  virtual std::shared_ptr<Work> watch_graph_replay() { return nullptr; }
  // Tells the other members that this rank is leaving (Note [Who left] in collective_log.h):
  // destroy_process_group and the exit hook of world.cpp call it. No-op in a world of one.
  void record_departure(const std::string& how) { log_->record_departure(how); }
  // Waits until member ranks[i] has set keys[i] in this group's store (a barrier or an exchange
  // through the store), at most `timeout`; a member that leaves meanwhile fails it within seconds,
  // naming the rank, instead of the timeout (CollectiveLog::wait_for_keys). `what` names the
  // caller's operation in the error.
  void wait_for_keys(const std::vector<std::string>& keys, const std::vector<int>& ranks,
                     Millis timeout, const std::string& what);

 protected:
  // The backend's collectives (process_group_methods.inc lists them).
#define LOOM_PROCESS_GROUP_METHOD(name, params) virtual std::shared_ptr<Work> name params = 0;
#include "distributed/process_group/process_group_methods.inc"
#undef LOOM_PROCESS_GROUP_METHOD
  // Throws an error naming op and tensor when `t` is not on a device this backend serves.
  virtual void check_device(const char* op, const Tensor& t) const = 0;

  CollectiveLog& log() { return *log_; }

 private:
  void check_tensor(const char* op, const Tensor& t) const;
  int rank_, size_;
  std::shared_ptr<Store> store_;
  Millis timeout_;
  std::vector<int> world_ranks_;
  std::unique_ptr<CollectiveLog> log_;
};

}  // namespace loom::distributed
