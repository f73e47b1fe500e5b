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
  // all_reduce, broadcast, barrier: already done (one rank holds the result). all_gather,
  // reduce_scatter: out and in have the same numel here; out gets a copy of in. send, recv: an
  // error (no other rank).
#define LOOM_PROCESS_GROUP_METHOD(name, params) std::shared_ptr<Work> name params override;
#include "distributed/process_group/process_group_methods.inc"
#undef LOOM_PROCESS_GROUP_METHOD
  void check_device(const char*, const Tensor&) const override {}  // any device
};

}  // namespace loom::distributed
