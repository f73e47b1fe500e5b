// ProcessGroup's checks and bookkeeping shared by every backend: each public collective checks
// its tensors and arguments, names the op in the collective log and calls the backend's do_*.
// Leaves out: the transports (local_process_group.cpp, gloo_process_group.cpp,
// nccl_process_group.cpp) and init_process_group / new_group (world.cpp).
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Product:
      return "product";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout)
    : rank_(rank), size_(size), store_(std::move(store)), timeout_(timeout) {
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank,
             " is not in a group of size ", size);
  LOOM_CHECK(size == 1 || store_, "ProcessGroup: a group of ", size, " processes needs a store");
  LOOM_CHECK(timeout.count() > 0, "ProcessGroup: the timeout must be positive, got ",
             timeout.count(), " ms");
  log_ = std::make_unique<CollectiveLog>(store_, rank, size);
}

ProcessGroup::~ProcessGroup() = default;

void ProcessGroup::wait_for_keys(const std::vector<std::string>& keys,
                                 const std::vector<int>& ranks, Millis timeout,
                                 const std::string& what) {
  LOOM_CHECK(store_ != nullptr, what, ": this group (rank ", rank_, " of ", size_,
             ") has no store");
  log_->wait_for_keys(*store_, keys, ranks, timeout, what);
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  LOOM_CHECK(t.defined(), op, ": the tensor is undefined");
  LOOM_CHECK(t.is_contiguous(), op, ": the tensor ", describe(t),
             " is not contiguous (pass t.contiguous() and copy the result back)");
  check_device(op, t);
}

namespace {
void check_reduce(const char* op, const Tensor& t, ReduceOp r) {
  LOOM_CHECK(r != ReduceOp::Avg || is_floating(t.dtype()), op,
             ": ReduceOp::Avg needs a floating-point tensor, got ", describe(t),
             " (use Sum and divide, Note [Reductions and dtypes])");
}
}  // namespace

std::shared_ptr<Work> ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  check_tensor("all_reduce", t);
  check_reduce("all_reduce", t, op);
  return do_all_reduce(t, op, log_->begin("all_reduce", t.numel(), t.dtype()));
}

std::shared_ptr<Work> ProcessGroup::broadcast(Tensor& t, int root) {
  check_tensor("broadcast", t);
  LOOM_CHECK(root >= 0 && root < size_, "broadcast: root ", root,
             " is not a rank of this group of ", size_);
  return do_broadcast(t, root, log_->begin("broadcast", t.numel(), t.dtype()));
}

std::shared_ptr<Work> ProcessGroup::all_gather(Tensor& out, const Tensor& in) {
  check_tensor("all_gather", out);
  check_tensor("all_gather", in);
  LOOM_CHECK(out.dtype() == in.dtype() && out.device() == in.device(), "all_gather: out ",
             describe(out), " and in ", describe(in), " differ in dtype or device");
  LOOM_CHECK(out.numel() == in.numel() * size_, "all_gather: out ", describe(out), " has ",
             out.numel(), " elements; it needs ", size_, " x ", in.numel(), " (in ", describe(in),
             ")");
  return do_all_gather(out, in, log_->begin("all_gather", in.numel(), in.dtype()));
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  check_tensor("reduce_scatter", out);
  check_tensor("reduce_scatter", in);
  check_reduce("reduce_scatter", in, op);
  LOOM_CHECK(out.dtype() == in.dtype() && out.device() == in.device(), "reduce_scatter: out ",
             describe(out), " and in ", describe(in), " differ in dtype or device");
  LOOM_CHECK(in.numel() == out.numel() * size_, "reduce_scatter: in ", describe(in), " has ",
             in.numel(), " elements; it needs ", size_, " x ", out.numel(), " (out ", describe(out),
             ")");
  return do_reduce_scatter(out, in, op, log_->begin("reduce_scatter", in.numel(), in.dtype()));
}

std::shared_ptr<Work> ProcessGroup::barrier() {
  return do_barrier(log_->begin("barrier", 0, DType::U8));
}

std::shared_ptr<Work> ProcessGroup::send(const Tensor& t, int dst, int tag) {
  check_tensor("send", t);
  LOOM_CHECK(dst >= 0 && dst < size_ && dst != rank_, "send: destination ", dst,
             " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  LOOM_CHECK(tag >= 0, "send: tag ", tag, " is negative");
  return do_send(t, dst, tag, log_->point_to_point("send", t.numel(), t.dtype(), dst));
}

std::shared_ptr<Work> ProcessGroup::recv(Tensor& t, int src, int tag) {
  check_tensor("recv", t);
  LOOM_CHECK(src >= 0 && src < size_ && src != rank_, "recv: source ", src,
             " is not another rank of this group (rank ", rank_, " of ", size_, ")");
  LOOM_CHECK(tag >= 0, "recv: tag ", tag, " is negative");
  return do_recv(t, src, tag, log_->point_to_point("recv", t.numel(), t.dtype(), src));
}

}  // namespace loom::distributed
