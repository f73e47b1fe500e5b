// The tensor-parallel Linears (distributed/tensor_parallel/tp_linear.h): cutting this rank's share
// out of the whole Linear, the forwards between f and g (Note [f and g] in tp_regions.h), and the
// gathers back to the whole. Leaves out: fused epilogues (a split Linear runs loom::linear).
#include "distributed/tensor_parallel/tp_linear.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "distributed/tensor_parallel/tp_regions.h"

namespace loom::distributed {

namespace {

int rank_of(const std::shared_ptr<ProcessGroup>& tp, const char* who) {
  LOOM_CHECK(tp != nullptr, who, ": the tensor-parallel group is null");
  return tp->rank();
}

// The ranges' rows of t (dim 0), one after another, as a new leaf tensor.
Tensor take_rows(const Tensor& t, const std::vector<RowRange>& rows) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> parts;
  for (const RowRange& r : rows) {
    LOOM_CHECK(r.start >= 0 && r.count > 0 && r.start + r.count <= t.size(0),
               "ColumnParallelLinear: rows [", r.start, ", ", r.start + r.count, ") of ",
               describe(t));
    parts.push_back(slice(t, 0, r.start, r.start + r.count));
  }
  return contiguous(cat(parts, 0)).detach().clone();
}

const std::vector<RowRange>& mine(const std::vector<std::vector<RowRange>>& rows_of_rank,
                                  const std::shared_ptr<ProcessGroup>& tp) {
  const int r = rank_of(tp, "ColumnParallelLinear");
  LOOM_CHECK(int(rows_of_rank.size()) == tp->size(), "ColumnParallelLinear: ", rows_of_rank.size(),
             " ranks' rows for a group of ", tp->size());
  return rows_of_rank[r];
}

Tensor columns(const Tensor& w, int64_t start, int64_t cols) {
  autograd::NoGradGuard no_grad;
  LOOM_CHECK(start >= 0 && cols > 0 && start + cols <= w.size(1), "RowParallelLinear: columns [",
             start, ", ", start + cols, ") of ", describe(w));
  return contiguous(slice(w, 1, start, start + cols)).detach().clone();
}

// Every rank's t (same shape on every rank), rank after rank along dim 0.
Tensor all_gathered(const Tensor& t, ProcessGroup& group) {
  Shape s = t.shape();
  s[0] *= group.size();
  Tensor out = empty(s, {.dtype = t.dtype(), .device = t.device()});
  group.all_gather(out, contiguous(t.detach()))->wait();
  return out;
}

// The whole tensor (rows of every rank put back at their places) from the rank-major gather.
Tensor reassemble(const Tensor& gathered, const std::vector<std::vector<RowRange>>& rows_of_rank,
                  int64_t whole_rows) {
  autograd::NoGradGuard no_grad;
  Shape s = gathered.shape();
  s[0] = whole_rows;
  Tensor whole = empty(s, {.dtype = gathered.dtype(), .device = gathered.device()});
  const int64_t per_rank = gathered.size(0) / int64_t(rows_of_rank.size());
  for (size_t r = 0; r < rows_of_rank.size(); ++r) {
    int64_t at = int64_t(r) * per_rank;
    for (const RowRange& rr : rows_of_rank[r]) {
      slice(whole, 0, rr.start, rr.start + rr.count).copy_(slice(gathered, 0, at, at + rr.count));
      at += rr.count;
    }
  }
  return whole;
}

}  // namespace

RowRange even_share(int64_t n, int ranks, int r, const char* what) {
  LOOM_CHECK(ranks >= 1 && n % ranks == 0, "tensor parallel: tp ", ranks, " does not divide the ",
             n, " ", what);
  return {r * (n / ranks), n / ranks};
}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& whole,
                                           std::vector<std::vector<RowRange>> rows,
                                           std::shared_ptr<ProcessGroup> group)
    : nn::Linear("ColumnParallelLinear", take_rows(whole.weight, mine(rows, group)),
                 whole.bias.defined() ? take_rows(whole.bias, mine(rows, group)) : Tensor()),
      whole_out_features(whole.out_features),
      rows_of_rank(std::move(rows)),
      tp(std::move(group)) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  if (sequence_parallel) return nn::Linear::forward(all_gather_sequence(x, *tp));  // (B, T, out_r)
  return nn::Linear::forward(copy_to_tensor_parallel(x, *tp));
}

RowParallelLinear::RowParallelLinear(const nn::Linear& whole, int64_t start, int64_t cols,
                                     std::shared_ptr<ProcessGroup> group)
    : nn::Linear("RowParallelLinear", columns(whole.weight, start, cols),
                 whole.bias.defined() ? whole.bias.detach().clone() : Tensor()),
      whole_in_features(whole.in_features),
      col_start(start),
      tp(std::move(group)) {
  rank_of(tp, "RowParallelLinear");
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor partial = linear(x, weight, Tensor());                         // (B, T, out)
  Tensor y = sequence_parallel ? reduce_scatter_sequence(partial, *tp)  // (B, T/tp, out)
                               : reduce_from_tensor_parallel(partial, *tp);
  return bias.defined() ? y + bias : y;
}

Tensor gather_whole_weight(const ColumnParallelLinear& l) {
  return reassemble(all_gathered(l.weight, *l.tp), l.rows_of_rank, l.whole_out_features);
}

Tensor gather_whole_bias(const ColumnParallelLinear& l) {
  return reassemble(all_gathered(l.bias, *l.tp), l.rows_of_rank, l.whole_out_features);
}

Tensor gather_whole_weight(const RowParallelLinear& l) {
  // The columns of rank r are [r cols, (r + 1) cols): gather the transposes as rows.
  autograd::NoGradGuard no_grad;
  Tensor t = all_gathered(contiguous(transpose(l.weight, 0, 1)), *l.tp);  // (whole_in, out)
  return contiguous(transpose(t, 0, 1));
}

}  // namespace loom::distributed
