// LocalProcessGroup's collectives: a world of one, where each is already done or a copy.
// Leaves out: the public checks that ran before (process_group.cpp) and choosing this group
// (world.cpp).
#include "distributed/process_group/local_process_group.h"

#include "autograd/grad_mode.h"

namespace loom::distributed {

namespace {
std::shared_ptr<Work> done_work() {
  auto w = std::make_shared<CompletionWork>();
  w->mark_done();
  return w;
}

// out gets in's elements (the same count: size() == 1), unless they are the same tensor.
std::shared_ptr<Work> copy(Tensor& out, const Tensor& in) {
  if (out.numel() > 0 && !out.is_same(in)) {
    autograd::NoGradGuard no_grad;
    out.copy_(make_view(in, out.shape(), out.strides(), in.offset()));
  }
  return done_work();
}
}  // namespace

std::shared_ptr<Work> LocalProcessGroup::do_all_reduce(Tensor&, ReduceOp, const OpRecord&) {
  return done_work();
}

std::shared_ptr<Work> LocalProcessGroup::do_broadcast(Tensor&, int, const OpRecord&) {
  return done_work();
}

std::shared_ptr<Work> LocalProcessGroup::do_barrier(const OpRecord&) { return done_work(); }

std::shared_ptr<Work> LocalProcessGroup::do_all_gather(Tensor& out, const Tensor& in,
                                                       const OpRecord&) {
  return copy(out, in);
}

std::shared_ptr<Work> LocalProcessGroup::do_reduce_scatter(Tensor& out, const Tensor& in, ReduceOp,
                                                           const OpRecord&) {
  return copy(out, in);
}

std::shared_ptr<Work> LocalProcessGroup::do_send(const Tensor&, int, int, const OpRecord&) {
  LOOM_FAIL("send: a world of one has no other rank");
}

std::shared_ptr<Work> LocalProcessGroup::do_recv(Tensor&, int, int, const OpRecord&) {
  LOOM_FAIL("recv: a world of one has no other rank");
}

}  // namespace loom::distributed
