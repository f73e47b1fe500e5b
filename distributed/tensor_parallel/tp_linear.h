// The tensor-parallel Linears: ColumnParallelLinear holds some of a Linear's output features (rows
// of its weight), RowParallelLinear some of its input features (columns), each made from the whole
// Linear by keeping this rank's share; and the gather that puts a whole weight back together (for
// checkpoints, which are saved in the unsharded layout). Leaves out: which Linears of a model are
// split (tensor_parallel.h) and the vocabulary-parallel embedding and loss.
#pragma once

#include <memory>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "nn/layers.h"

namespace loom::distributed {

// Rows [start, start + count) of a whole weight.
struct RowRange {
  int64_t start = 0, count = 0;
};

// y_r = f(x) W_r^T + b_r: W_r (sum of the ranges' counts, in) the rows of the whole weight that
// rank r holds, in the order of `rows_of_rank[r]` (a packed projection keeps several ranges:
// attention's q, k and v, SwiGLU's gate and up), b_r the same entries of the bias. The output is
// this rank's features only (B, ..., out_r). Printed as ColumnParallelLinear. With
// sequence_parallel, x is this rank's positions (B, T/tp, in) and is all-gathered along T instead
// of f (all_gather_sequence, Note [Sequence-parallel regions] in tp_regions.h): y_r is (B, T,
// out_r).
class ColumnParallelLinear : public nn::Linear {
 public:
  // rows_of_rank[r] are rank r's ranges (every rank's, so that any rank can reassemble the whole);
  // this rank's come from `whole`, which is left as it was.
  ColumnParallelLinear(const nn::Linear& whole, std::vector<std::vector<RowRange>> rows_of_rank,
                       std::shared_ptr<ProcessGroup> tp);
  Tensor forward(const Tensor& x) override;

  int64_t whole_out_features;
  std::vector<std::vector<RowRange>> rows_of_rank;
  std::shared_ptr<ProcessGroup> tp;
  bool sequence_parallel = false;  // set by parallelize_tensor (TensorParallelOptions)
};

// y = g(x_r W_r^T) + b: x_r (B, ..., cols) this rank's input features (a ColumnParallelLinear's
// output), W_r (out, cols) the columns [col_start, col_start + cols) of the whole weight; the bias
// is whole and added once, after the sum. Printed as RowParallelLinear. With sequence_parallel the
// partial sums (B, T, out) are reduce-scattered along T instead of g (reduce_scatter_sequence): y
// is this rank's positions (B, T/tp, out), and the bias, added to them only, gets a partial
// gradient (Note [Sequence parallel] in sequence_parallel.h).
class RowParallelLinear : public nn::Linear {
 public:
  RowParallelLinear(const nn::Linear& whole, int64_t col_start, int64_t cols,
                    std::shared_ptr<ProcessGroup> tp);
  Tensor forward(const Tensor& x) override;

  int64_t whole_in_features, col_start;
  std::shared_ptr<ProcessGroup> tp;
  bool sequence_parallel = false;  // set by parallelize_tensor (TensorParallelOptions)
};

// The whole weight (and bias) of a split Linear, gathered from every rank of its group (a
// collective): (whole_out, in) for a column-parallel one, (out, whole_in) for a row-parallel one.
// `bias` of a row-parallel Linear is its own (already whole).
Tensor gather_whole_weight(const ColumnParallelLinear& l);
Tensor gather_whole_bias(const ColumnParallelLinear& l);
Tensor gather_whole_weight(const RowParallelLinear& l);

// Rank r's share of n things split evenly over `ranks`: [r n / ranks, (r + 1) n / ranks). An error
// naming `what`, n and ranks when ranks does not divide n ("tensor parallel: tp 4 does not divide
// the 2 key/value heads of layers.0.attn").
RowRange even_share(int64_t n, int ranks, int r, const char* what);

}  // namespace loom::distributed
