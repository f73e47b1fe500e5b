// ProcessGroup: collectives over a set of processes (all_reduce, broadcast, all_gather,
// reduce_scatter, barrier, send/recv), each returning a Work; init_process_group and new_group.
// Leaves out: the transports (gloo_process_group.h, nccl_process_group.h) and DDP.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/collective_log.h"
#include "distributed/store.h"
#include "distributed/work.h"

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

 protected:
  virtual std::shared_ptr<Work> do_all_reduce(Tensor& t, ReduceOp op, const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_broadcast(Tensor& t, int root, const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_all_gather(Tensor& out, const Tensor& in,
                                              const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                                                  const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_barrier(const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_send(const Tensor& t, int dst, int tag, const OpRecord& rec) = 0;
  virtual std::shared_ptr<Work> do_recv(Tensor& t, int src, int tag, const OpRecord& rec) = 0;
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

// ---------------------------------------------------------------- starting a job
struct InitOptions {
  // "nccl", "gloo", or "auto": NCCL when loom has it and a GPU is present, else Gloo.
  std::string backend = "auto";
  Millis timeout = std::chrono::minutes(10);  // every collective's timeout
  // The store to rendezvous through. Null: rank 0 serves a TCPStore on MASTER_ADDR:MASTER_PORT
  // and the others connect, unless LOOM_STORE_EXTERNAL=1 (the launcher serves it: every rank
  // connects). Store connections wait up to store_timeout for the server.
  std::shared_ptr<Store> store;
  Millis store_timeout = std::chrono::minutes(5);
  int device = -1;  // NCCL: the CUDA device (default LOCAL_RANK % device_count())
};

// Reads the job from the environment (distributed/env.h), connects the store and builds the world
// group; every process of the job calls it once. A world of one needs no store or network.
// With NCCL it makes the rank's device current (cuda::set_device), as PyTorch users do by hand.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
bool is_initialized();
std::shared_ptr<ProcessGroup> world();  // the group init_process_group made (an error before)
// A sub-group of world ranks `ranks` with its own communicator and store prefix. Every process of
// the world calls it, in the same order, with the same ranks; members get the group, others null.
// A member's rank in the group is its position among the sorted `ranks`. backend "" uses the
// world's; timeout 0 uses the world's.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, Millis timeout = Millis(0),
                                        const std::string& backend = "");
void destroy_process_group();  // drops the world group and the store (rank 0 stops serving)

// Builds a group directly (tests, benchmarks): backend "gloo" or "nccl" over `store`.
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int rank, int size,
                                                 std::shared_ptr<Store> store, Millis timeout,
                                                 int device = -1);

}  // namespace loom::distributed
