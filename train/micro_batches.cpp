// Gradient accumulation: see train/micro_batches.h (Note [Gradient accumulation]).
#include "train/micro_batches.h"

#include <memory>

#include "autograd/ops/ops.h"
#include "distributed/parallel/parallel_model.h"

namespace loom::train {

Tensor MicroBatch::share(const Tensor& loss) const {
  return count == 1 ? loss : loss / double(count);
}

void MicroBatch::forward_done() const {
  if (profiler && last()) profiler->mark(StepProfiler::ForwardEnd);
}

namespace {
// After the last micro-batch's backward: the marks of Note [Step phases] that backward ends.
void mark_backward_end(StepProfiler* p) {
  if (!p) return;
  if (!p->marked(StepProfiler::BackwardComputed))
    p->mark(StepProfiler::BackwardComputed);  // unless DDP's reducer already did
  p->mark(StepProfiler::BackwardEnd);
}
}  // namespace

Tensor accumulate(const Tensor& x, const Tensor& y, const Accumulation& how,
                  const ForwardBackward& fn) {
  const int64_t k = how.k;
  LOOM_CHECK(k >= 1, "accumulate: --grad-accum ", k,
             " must be at least 1 (micro-batches per step)");
  if (k == 1) {
    Tensor loss = fn(MicroBatch{x, y, 0, 1, how.profiler});
    if (how.model) how.model->finish_gradients();
    mark_backward_end(how.profiler);
    return loss;
  }
  const int64_t n = x.dim() > 0 ? x.size(0) : 0;
  LOOM_CHECK(n % k == 0 && y.dim() > 0 && y.size(0) == n, "accumulate: --grad-accum ", k,
             " splits the batch into equal micro-batches, but the batch has ", n, " examples (x ",
             describe(x), ", y ", describe(y), "), not a multiple of ", k);
  const int64_t m = n / k;
  Tensor total;
  for (int64_t i = 0; i < k; ++i) {
    std::unique_ptr<distributed::ParallelModel::Pause> no_sync;
    if (how.model && i + 1 < k) no_sync = how.model->no_sync();  // only the last one reduces
    MicroBatch mb{x.slice(0, i * m, (i + 1) * m), y.slice(0, i * m, (i + 1) * m), i, k,
                  how.profiler};
    Tensor loss = fn(mb);
    total = total.defined() ? total + loss : loss;
  }
  if (how.model) how.model->finish_gradients();  // sequence parallel's sums over tp
  mark_backward_end(how.profiler);
  return total;
}

}  // namespace loom::train
