// A tensor-parallel model's state in the whole model's layout: which of its tensors are shares of
// a whole one and how (tensor_shares), the gather that makes a share whole and the cut that takes
// this rank's share of a whole tensor, for the model's state_dict and for the optimizer's state
// (Adam's moments have their parameter's shape, and are split like it). Checkpoints save the
// whole layout, so a run saved at tp 2 resumes at tp 4, as DDP, or alone (Note [Whole-layout
// checkpoints]). Leaves out: splitting the model (tensor_parallel.h) and pipeline stages.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "distributed/tensor_parallel/tp_linear.h"
#include "nn/module.h"
#include "nn/optim/optimizer.h"
#include "nn/state_dict.h"

namespace loom::distributed {

// Note [Whole-layout checkpoints]
// A split parameter of shape S on rank r holds, along one dimension `dim`, the ranges
// ranges_of_rank[r] of the whole tensor (a ColumnParallelLinear: rows, several ranges when the
// projection is packed, as attention's q, k and v; a RowParallelLinear: columns; the vocabulary-
// parallel embedding: rows). Saving gathers every rank's ranges and puts them back in place: the
// state_dict of the model before parallelize_tensor. Loading cuts this rank's ranges out of the
// whole tensor. An optimizer's per-parameter buffers of the parameter's shape (Adam's exp_avg and
// exp_avg_sq) are gathered and cut the same way; scalars (the step) are the same on every rank.
struct TensorShare {
  int dim = 0;  // 0: rows, 1: columns
  std::vector<std::vector<RowRange>> ranges_of_rank;
  int64_t whole = 0;  // the whole tensor's size along dim
  std::shared_ptr<ProcessGroup> tp;
};

// Every parameter of `model` that is a share of a whole one, by its tensor.
std::unordered_map<const TensorImpl*, TensorShare> tensor_shares(nn::Module& model);

// The whole tensor from every rank's share `local` (a collective over s.tp; local has this rank's
// shape of the parameter).
Tensor gather_share(const Tensor& local, const TensorShare& s);
// This rank's share of `whole` (a copy, contiguous).
Tensor cut_share(const Tensor& whole, const TensorShare& s);

// `whole` (a state_dict of the unsplit model) with each split parameter cut to this rank's share:
// what model.load_state_dict takes.
nn::StateDict share_of_state_dict(nn::Module& model, const nn::StateDict& whole);

// An optimizer state_dict `sd` with each buffer of a split parameter gathered whole (a
// collective), and its inverse: this rank's share of a whole optimizer state. `numbering` is the
// optimizer whose parameter numbers the entries use ("state.<i>.exp_avg": its i-th parameter), over
// `model`'s parameters (in any order, any subset); usually the one that saved `sd`.
nn::StateDict whole_optimizer_state(nn::Module& model, const optim::Optimizer& numbering,
                                    nn::StateDict sd);
nn::StateDict share_of_optimizer_state(nn::Module& model, const optim::Optimizer& numbering,
                                       const nn::StateDict& whole);

}  // namespace loom::distributed
