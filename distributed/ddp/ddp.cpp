// DistributedDataParallel: construction checks, broadcasts, the forward, join and the consistency
// check. See distributed/ddp/ddp.h; the gradient side is distributed/ddp/reducer.cpp.
#include "distributed/ddp/ddp.h"

#include <map>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "autograd/ops/shape.h"
#include "core/crc32c.h"
#include "core/scoped_value.h"
#include "distributed/world.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif

namespace loom::distributed {

namespace {
int next_instance() {
  static int n = 0;
  return n++;
}
std::string shape_str(const Tensor& t) { return str(t.shape()); }
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> pg,
                                                 DDPOptions options)
    : nn::Module("DistributedDataParallel"),
      module_(std::move(module)),
      pg_(pg ? std::move(pg) : world()),
      opt_(options) {
  LOOM_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  LOOM_CHECK(opt_.check_consistency_every >= 0,
             "DistributedDataParallel: check_consistency_every "
             "must be >= 0, got ",
             opt_.check_consistency_every);
  share_members_of(*module_);  // Note [DDP as a module]
  nn::Module::train(module_->is_training());
  verify_same_layout();
  broadcast_state(0);
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : module_->named_parameters())
    if (p.requires_grad()) {
      params.push_back(p);
      names.push_back(name);
    }
  reducer_ = Reducer::create(params, names, pg_, opt_.reducer);
}

void DistributedDataParallel::train(bool on) {
  nn::Module::train(on);
  module_->train(on);
}

// Note [Same model on every rank]
// Each rank lists "param|buffer name dtype shape" for every tensor of the model and puts the list
// in the store; every rank reads all lists and compares them with rank 0's, so every rank fails
// with the same message, naming the first entry that differs and the ranks that differ.
void DistributedDataParallel::verify_same_layout() {
  int instance = next_instance();
  if (pg_->size() == 1) return;
  LOOM_CHECK(pg_->store() != nullptr, "DistributedDataParallel: the process group has no store");
  auto describe_all = [&] {
    std::vector<std::string> lines;
    for (auto& [n, p] : module_->named_parameters())
      lines.push_back("parameter '" + n + "' " + dtype_name(p.dtype()) + " " + shape_str(p));
    for (auto& [n, b] : module_->named_buffers())
      lines.push_back("buffer '" + n + "' " + dtype_name(b.dtype()) + " " + shape_str(b));
    return lines;
  };
  std::vector<std::string> mine = describe_all();
  std::string joined;
  for (auto& l : mine) joined += l + "\n";
  std::string prefix = "ddp" + std::to_string(instance) + "/layout/";
  pg_->store()->set(prefix + std::to_string(pg_->rank()), joined);
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < pg_->size(); ++r) {
    keys.push_back(prefix + std::to_string(r));
    ranks.push_back(r);
  }
  // A rank that left before it got here is named within seconds (Note [Who left]).
  pg_->wait_for_keys(keys, ranks, pg_->timeout(), "DistributedDataParallel: comparing layouts");
  std::vector<std::vector<std::string>> all;
  for (int r = 0; r < pg_->size(); ++r) {
    std::string s = pg_->store()->get_string(prefix + std::to_string(r), pg_->timeout());
    std::vector<std::string> lines;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    all.push_back(std::move(lines));
  }
  size_t longest = 0;
  for (auto& l : all) longest = std::max(longest, l.size());
  for (size_t k = 0; k < longest; ++k) {
    std::string ref = k < all[0].size() ? all[0][k] : "nothing";
    std::vector<int> differ;
    std::string theirs;
    for (int r = 1; r < pg_->size(); ++r) {
      std::string e = k < all[size_t(r)].size() ? all[size_t(r)][k] : "nothing";
      if (e != ref) {
        if (differ.empty()) theirs = e;
        differ.push_back(r);
      }
    }
    if (differ.empty()) continue;
    std::ostringstream ranks;
    for (size_t i = 0; i < differ.size(); ++i) ranks << (i ? ", " : "") << differ[i];
    LOOM_FAIL("DistributedDataParallel: the model differs across ranks (seen on rank ", pg_->rank(),
              "): entry ", k, " is ", ref, " on rank 0 but ", theirs, " on rank(s) ", ranks.str(),
              " (rank 0 has ", all[0].size(),
              " parameters and buffers). Every rank must build "
              "the same model");
  }
}

void DistributedDataParallel::broadcast_state(int root) {
  if (pg_->size() == 1) return;
  autograd::NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> works;
  for (auto& [n, p] : module_->named_parameters()) {
    Tensor t = p;
    works.push_back(pg_->broadcast(t, root));
  }
  for (auto& [n, b] : module_->named_buffers()) {
    Tensor t = b;
    works.push_back(pg_->broadcast(t, root));
  }
  for (auto& w : works) w->wait();
}

// Rank 0's buffers, one broadcast per dtype: the buffers are packed into one flat tensor.
void DistributedDataParallel::sync_buffers() { broadcast_buffers(*module_, *pg_); }

void broadcast_buffers(nn::Module& module, ProcessGroup& pg) {
  auto buffers = module.buffers();
  if (buffers.empty() || pg.size() == 1) return;
  autograd::NoGradGuard no_grad;
  std::map<int, std::vector<Tensor>> by_dtype;
  for (auto& b : buffers) by_dtype[int(b.dtype())].push_back(b);
  for (auto& [dt, group] : by_dtype) {
    std::vector<Tensor> flat_parts;
    for (auto& b : group) flat_parts.push_back(b.reshape({b.numel()}));
    Tensor flat = cat(flat_parts, 0);
    pg.broadcast(flat, 0)->wait();
    if (pg.rank() == 0) continue;
    int64_t off = 0;
    for (auto& b : group) {
      b.copy_(flat.slice(0, off, off + b.numel()).reshape(b.shape()));
      off += b.numel();
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  return run_training_forward(x, [&] { return module_->forward(x); });
}

Tensor DistributedDataParallel::loss(const Tensor& x, const Tensor& y) {
  return run_training_forward(x, [&] { return module_->loss(x, y); });
}

Tensor DistributedDataParallel::run_training_forward(const Tensor& x,
                                                     const std::function<Tensor()>& body) {
  bool training_step = is_training() && autograd::is_grad_enabled();
  const bool captured = training_step && capturing(x);  // Note [DDP and CUDA graphs]
  if (captured) {
    reducer_->check_capturable("DistributedDataParallel::forward under CUDA graph capture");
    LOOM_CHECK(!join_active_ && !reducer_->rebuild_due(),
               "DistributedDataParallel::forward under CUDA graph capture: ",
               join_active_ ? "join() counts the active ranks on the host every step"
                            : "the buckets' rebuild is due (its broadcast is read on the host)",
               "; call prepare_for_capture() after an eager step and before capturing");
  }
  if (join_active_ && training_step) {
    LOOM_CHECK(sync_,
               "DistributedDataParallel: no_sync inside join is not supported (the joined "
               "ranks mirror one all-reduce per forward)");
    Tensor active = full({1}, 1.0, {.dtype = DType::I32, .device = x.device()});
    pg_->all_reduce(active, ReduceOp::Sum)->wait();  // joined ranks count the active ones
  }
  if (training_step && !captured && !join_active_ && opt_.check_consistency_every > 0 &&
      iteration_ % opt_.check_consistency_every == 0)
    check_consistency();  // a captured step's check runs before each replay (before_replay)
  if (opt_.broadcast_buffers) sync_buffers();
  if (training_step) reducer_->prepare_for_forward(sync_);
  Tensor out = body();
  if (training_step) {
    reducer_->prepare_for_backward({out});
    if (!captured) ++iteration_;  // the replays count theirs (before_replay)
  }
  return out;
}

// Note [DDP and CUDA graphs]
// With a process group whose collectives can be captured (NCCL), a whole training step, DDP's
// forward and the reducer's bucket all-reduces included, can be captured into one CUDA graph and
// replayed (Note [The training step as a CUDA graph] in train/cuda_graph_step.h). Under capture the
// forward does what it does eagerly on the device (rank 0's buffers broadcast, the buckets bound
// and zero-filled; the backward's all-reduces in bucket order, Note [Reducer under graph
// capture]), but nothing that needs the host: the consistency check (a copy of the weights to the
// host and an all-gather read back) runs outside the graph, before each replay that is due
// (before_replay counts the replayed forwards like eager ones, so the check keeps its schedule),
// and join() is refused. Gloo is refused with its reason: its collectives run on host threads
// over CPU tensors, so there is nothing a CUDA graph could hold. Each replay is watched by the
// group as one op (ProcessGroup::watch_graph_replay), so the collective timeout still holds.
void DistributedDataParallel::prepare_for_capture() {
  LOOM_CHECK(!join_active_,
             "DistributedDataParallel::prepare_for_capture: inside join(), which counts the "
             "active ranks on the host every step; a captured step cannot hold that");
  reducer_->prepare_for_capture();
}

void DistributedDataParallel::before_replay(int64_t forwards) {
  LOOM_CHECK(forwards >= 1, "DistributedDataParallel::before_replay: ", forwards,
             " forwards per replay; a captured training step holds at least one");
  for (int64_t i = 0; i < forwards; ++i, ++iteration_)
    if (opt_.check_consistency_every > 0 && iteration_ % opt_.check_consistency_every == 0)
      check_consistency();
}

bool DistributedDataParallel::capturing(const Tensor& x) const {
#ifdef LOOM_WITH_CUDA
  return x.device().is_cuda() && cuda::is_capturing(cuda::current_stream(x.device().index));
#else
  (void)x;
  return false;
#endif
}

void DistributedDataParallel::join(const std::function<void()>& body) {
  LOOM_CHECK(!join_active_, "DistributedDataParallel::join: already inside join");
  int64_t start = iteration_;
  {
    ScopedValue<bool> active(join_active_, true);
    body();
  }
  if (pg_->size() == 1) return;
  Device dev = reducer_->params().empty() ? kCPU : reducer_->params()[0].device();
  while (true) {
    Tensor active = zeros({1}, {.dtype = DType::I32, .device = dev});
    pg_->all_reduce(active, ReduceOp::Sum)->wait();
    if (int64_t(active.item()) == 0) break;
    if (opt_.broadcast_buffers) sync_buffers();
    reducer_->shadow_iteration();
  }
  // Everyone has finished: take the state of the rank that ran the most steps (lowest on ties).
  Tensor steps = full({1}, double(iteration_ - start), {.dtype = DType::I64, .device = dev});
  Tensor all = zeros({pg_->size()}, {.dtype = DType::I64, .device = dev});
  pg_->all_gather(all, steps)->wait();
  Tensor host = all.to(kCPU);
  int best = 0;
  for (int r = 1; r < pg_->size(); ++r)
    if (host.data<int64_t>()[r] > host.data<int64_t>()[best]) best = r;
  broadcast_state(best);
}

void DistributedDataParallel::check_consistency() {
  if (pg_->size() == 1) return;
  auto params = module_->named_parameters();
  if (params.empty()) return;
  std::vector<int64_t> h;
  for (auto& [n, p] : params) {
    Tensor c = p.detach().contiguous().to(kCPU);
    h.push_back(int64_t(crc32c(c.data_ptr(), size_t(c.numel()) * c.element_size())));
  }
  Device dev = params[0].second.device();
  int64_t n = int64_t(h.size());
  Tensor mine = from_vector(h, {n}).to(dev);
  Tensor all = zeros({n * pg_->size()}, {.dtype = DType::I64, .device = dev});
  pg_->all_gather(all, mine)->wait();
  Tensor host = all.to(kCPU);
  const int64_t* a = host.data<int64_t>();
  for (int64_t k = 0; k < n; ++k) {
    std::ostringstream differ;
    int count = 0;
    for (int r = 1; r < pg_->size(); ++r)
      if (a[r * n + k] != a[k]) differ << (count++ ? ", " : "") << r;
    if (count == 0) continue;
    LOOM_FAIL("DistributedDataParallel: the parameters have diverged across ranks at iteration ",
              iteration_, " (seen on rank ", pg_->rank(), "): parameter '", params[size_t(k)].first,
              "' differs between rank 0 and rank(s) ", differ.str(),
              ". Every rank must apply the "
              "same update to the same reduced gradients (same optimizer, same learning rate, no "
              "rank-local changes to the weights)");
  }
}

}  // namespace loom::distributed
