// LocalProcessGroup: the group of a world of one process (backend "local"). Every collective is
// the identity or a copy, and send/recv fail (there is no peer); no store, network or thread.
// init_process_group makes it for a job of one process, new_group for a sub-group of one rank
// (distributed/world.h). Leaves out: the public checks every group shares (process_group.h).
#pragma once

#include <memory>
#include <string>

#include "distributed/process_group/process_group.h"

namespace loom::distributed {

class LocalProcessGroup : public ProcessGroup {
 public:
  explicit LocalProcessGroup(Millis timeout) : ProcessGroup(0, 1, nullptr, timeout) {}
  std::string backend() const override { return "local"; }

 protected:
  // all_reduce, broadcast, barrier: already done (one rank holds the result).
  std::shared_ptr<Work> do_all_reduce(Tensor& t, ReduceOp op, const OpRecord& rec) override;
  std::shared_ptr<Work> do_broadcast(Tensor& t, int root, const OpRecord& rec) override;
  std::shared_ptr<Work> do_barrier(const OpRecord& rec) override;
  // all_gather, reduce_scatter: out and in have the same numel here; out gets a copy of in.
  std::shared_ptr<Work> do_all_gather(Tensor& out, const Tensor& in, const OpRecord& rec) override;
  std::shared_ptr<Work> do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op,
                                          const OpRecord& rec) override;
  // send, recv: an error (no other rank).
  std::shared_ptr<Work> do_send(const Tensor& t, int dst, int tag, const OpRecord& rec) override;
  std::shared_ptr<Work> do_recv(Tensor& t, int src, int tag, const OpRecord& rec) override;
  void check_device(const char*, const Tensor&) const override {}  // any device
};

}  // namespace loom::distributed
