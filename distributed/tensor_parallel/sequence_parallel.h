// Sequence parallelism (Korthikanti et al., 2022, "Reducing Activation Recomputation in Large
// Transformer Models", section 4.2.2; Megatron-LM's --sequence-parallel) for the tensor-parallel
// transformer: between the tensor-parallel regions each rank holds T/tp positions, so the norms,
// the dropouts and the residual adds run on a slice of the sequence; the stack that splits the
// sequence on the way in and gathers it on the way out, the dropout that draws a different mask on
// every rank, and the all-reduce of the gradients that only a slice produced. Leaves out: the
// embedding's and the final norm's activations and the split Linears' inputs (whole on every
// rank: see the Note), the KV-cache forward (generation is one position at a time), BERT's and
// the ViT's stacks, overlapping the collectives with the GEMMs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "nn/layers.h"
#include "nn/transformer.h"

namespace loom::distributed {

// Note [Sequence parallel]
// Tensor parallelism alone (Note [f and g] in tp_regions.h) leaves every rank the whole (B, T, C)
// activations between the regions: each norm, dropout and residual add is computed tp times over,
// and each keeps its (B, T, C) for backward on every rank. Sequence parallelism splits T there.
// With tp 2 and T 8, one block of a pre-norm model:
//
//   x (B, 8, C) on every rank --split_sequence--> rank 0: positions 0-3, rank 1: 4-7  (B, 4, C)
//     ln_1                          on the rank's 4 positions
//     all_gather_sequence  (g)      -> (B, 8, C): every position, for the rank's heads
//     attention, c_proj partial     on the rank's heads, all 8 positions
//     reduce_scatter_sequence (g-bar) -> (B, 4, C): the rank's positions, summed over the ranks
//     + bias, dropout, + residual   on the rank's 4 positions
//     ln_2, MLP the same way        (c_fc after g, c_proj before g-bar)
//   ... every block ...
//   --gather_sequence--> (B, 8, C) on every rank; the final norm, the head and the loss as before.
//
// Every op between g-bar and g works position by position, so each rank computing its positions
// is the same math as every rank computing all of them; the collectives move as much as f's and
// g's all-reduces did (an all-reduce is a reduce-scatter and an all-gather). What it saves: the
// norms' inputs and the dropouts' masks kept for backward are (B, T/tp, C) per rank instead of
// (B, T, C): 6 of the 10 sbh bytes per layer that Korthikanti et al. count as replicated under
// tensor parallelism. The other 4, the column-parallel Linears' inputs, stay whole here: the
// Linear keeps its all-gathered input for the weight's gradient (Megatron-LM keeps the slice and
// all-gathers again in backward; not done here).
//
// The gradients. A parameter used on the rank's positions only (the norms' weights and biases,
// the row-parallel Linears' biases, added after g-bar) gets on each rank the gradient of its
// positions only: the whole gradient is the sum over the tp ranks. sync_sequence_parallel_grads
// all-reduces them after backward (Megatron-LM does so for the parameters it marks
// `sequence_parallel`, in finalize_model_grads); after it they are whole and the same on every
// rank, as without sequence parallel, so clip_grad_norm_tensor_parallel_ counts them once.
// The split Linears' shards need nothing: g and g-bar give their gradients what f and g did.
// The embedding's output enters whole (split_sequence's backward all-gathers its gradient) and the
// final norm runs whole after gather_sequence, so their parameters' gradients are whole as before.
//
// Dropout. The dropout after each residual branch now sees the rank's positions only. Every tp rank
// seeds its generator alike (the embedding's dropout, on the whole x, must draw one mask on every
// rank), so a plain Dropout would give rank 1's positions the very mask of rank 0's.
// SequenceParallelDropout takes the counters of the whole (B, T, C) from the default generator on
// every rank, as the plain dropout of the whole would, and gives rank r the r-th block of them:
// disjoint draws, the generators still in step. (Megatron-LM forks a tensor-parallel RNG for the
// same reason.) The masks are not those of the run without sequence parallel: different positions,
// different draws; each element is still kept with probability 1 - p, independently. T must be
// divisible by tp: split_sequence's error names T and tp.

// A TransformerStack whose blocks run on this rank's positions: forward(x) is
// gather_sequence(blocks(split_sequence(x))). Holds the plain stack's blocks (the same modules:
// the same names in state_dict). Printed as SequenceParallelStack.
class SequenceParallelStack : public nn::TransformerStack {
 public:
  SequenceParallelStack(const nn::TransformerStack& plain, std::shared_ptr<ProcessGroup> tp);
  using nn::TransformerStack::forward;
  // x (B, T, C) the same on every rank -> (B, T/tp, C) through the blocks -> (B, T, C).
  Tensor forward(const Tensor& x) override;
  // Refused: a KV cache's forward runs one position at a time.
  Tensor forward(const Tensor& x, nn::Module& final_norm, nn::KVCache& cache) override;
  std::string extra_repr() const override;

  std::shared_ptr<ProcessGroup> tp;
};

// Dropout on this rank's positions (B, T/tp, C): the draw of rank r is block r of the counters a
// dropout of the whole (B, T, C) would take (Note [Sequence parallel]). Printed as Dropout.
class SequenceParallelDropout : public nn::Dropout {
 public:
  SequenceParallelDropout(double p, std::shared_ptr<ProcessGroup> tp);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  std::shared_ptr<ProcessGroup> tp;
};

// Switches a GPT's or a Llama's split blocks to sequence parallel: the split Linears all-gather and
// reduce-scatter along T, the residual dropouts become SequenceParallelDropouts, the stack a
// SequenceParallelStack. parallelize_tensor calls it (TensorParallelOptions::sequence_parallel),
// after splitting the Linears; an error names any other model.
void apply_sequence_parallel(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp);

// The parameters that get a partial gradient on each tp rank: every parameter inside a
// SequenceParallelStack but the split Linears' shards (norms, row-parallel biases).
std::vector<Tensor> sequence_parallel_parameters(const nn::Module& model);

// Sums the gradients of sequence_parallel_parameters(model) over `tp` (one all-reduce of them all,
// a collective): call after backward (and after DDP's reduction over dp, which it commutes with),
// before clip_grad_norm_tensor_parallel_ and the optimizer. Nothing to do without sequence
// parallel. Parameters without a gradient are skipped (every rank runs the same graph).
void sync_sequence_parallel_grads(nn::Module& model, ProcessGroup& tp);
// The same over a list of them (a pipeline stage's: PipelineStage::sync_sequence_parallel_grads).
void sync_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& tp);

// For FSDP over the dp copies of a sequence-parallel model (FSDPOptions::before_reduce): FSDP
// reduce-scatters a unit's gradients inside backward, before any sync after it could run, so this
// hook sums the unit's sequence_parallel_parameters(model) over `tp` first. Skips unit 0, the root:
// every such parameter is in a transformer block, and the blocks are the units (a pipeline stage's
// schedule sums any of the root's before the stage reduces it).
std::function<void(size_t unit, const std::vector<Tensor>& params)> sequence_parallel_reduce_hook(
    const nn::Module& model, std::shared_ptr<ProcessGroup> tp);

// The same for DDP's buckets under ZeRO-1 and 2 (ReducerOptions::before_reduce): each bucket is
// reduce-scattered over dp as soon as its gradients are complete, so the sum over tp of the
// bucket's sequence_parallel_parameters(model) gradients (in the bucket) must come first.
std::function<void(const std::vector<Tensor>& params, const std::vector<Tensor>& grads)>
sequence_parallel_bucket_hook(const nn::Module& model, std::shared_ptr<ProcessGroup> tp);

}  // namespace loom::distributed
