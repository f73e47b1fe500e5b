// Tensor parallelism for the transformer blocks of nn/transformer.h (GPT-2, Llama, ViT), as
// Megatron-LM splits them: parallelize_tensor swaps each block's Linears for the split ones of
// tp_linear.h (and, with TensorParallelOptions::sequence_parallel, runs the norms, dropouts and
// residual adds on T/tp positions: sequence_parallel.h); then the gradient clip over the whole
// model and the unsharded state_dict a checkpoint saves. Leaves out: the vocabulary-parallel
// embedding and loss (vocab_parallel.h; without it the embedding, the head and the loss stay whole
// on every tp rank), pipeline stages.
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "nn/module.h"
#include "nn/state_dict.h"

namespace loom::distributed {

// Note [The tensor-parallel plan]
// In every SelfAttention and MLP (or SwiGLUMLP) of the model, with tp ranks and this rank r:
//   attention  c_attn becomes a ColumnParallelLinear holding the q rows of query heads
//              [r H/tp, (r+1) H/tp) and the k and v rows of key/value heads [r Hkv/tp, ...);
//              c_proj a RowParallelLinear over the same heads' columns. Each rank attends with its
//              heads only (n_head and n_kv_head become H/tp and Hkv/tp): heads are independent.
//   MLP        c_fc becomes a ColumnParallelLinear of hidden units [r F/tp, (r+1) F/tp) (SwiGLU:
//              those of gate and those of up); c_proj a RowParallelLinear over the same units.
//              The activation is elementwise, so it runs on each rank's units alone.
// Per block that is two all-reduces forward (g after each c_proj) and two backward (f before each
// c_attn and c_fc); the norms, the residual adds, the embeddings and the head run whole on every
// rank (Note [f and g] in tp_regions.h); with sequence parallel the blocks' norms, dropouts and
// residual adds run on T/tp positions instead (Note [Sequence parallel] in sequence_parallel.h). tp
// must divide H, Hkv and F: otherwise an error names the module, the number and tp. Apply it to the
// plain model on its device, before nn::fuse (a fused MLP is refused), before DDP or FSDP wrap it
// and before the optimizer is made (the split Linears hold new tensors). Every rank must build the
// model with the same initial weights (the same seed), as for DDP: each keeps its share of them.
// Dropout in the blocks draws the same mask on every rank only if every rank's generator is seeded
// alike.

struct TensorParallelOptions {
  // Between the tensor-parallel regions each rank holds T/tp positions of the sequence (Note
  // [Sequence parallel] in sequence_parallel.h): GPT and Llama only; T must be divisible by tp;
  // after each backward call sync_sequence_parallel_grads.
  bool sequence_parallel = false;
};

// Splits every transformer block of `model` over `tp` (a collective only in that every rank of the
// group must call it alike; no data moves). Returns the number of Linears split. A group of one
// changes nothing and returns 0 (sequence parallel too: there is one slice, the whole).
int parallelize_tensor(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp,
                       TensorParallelOptions options = {});

// Whether p is a parameter of which every tp rank holds a different share (a split Linear's weight,
// a column-parallel bias), as opposed to one every rank holds whole (norms, embeddings, the
// row-parallel biases).
bool is_tensor_parallel_shard(nn::Module& model, const Tensor& p);

// clip_grad_norm_ over the whole model: the 2-norm of every gradient of the unsplit model (the
// shards' squares summed over `tp`, the whole parameters' counted once), every gradient scaled by
// min(1, max_norm / (total + 1e-6)). Returns total (0-d, the gradients' dtype). A collective.
// With sequence parallel, call it after sync_sequence_parallel_grads: it reads the norms' gradients
// as whole, the same on every rank, and counts them once.
Tensor clip_grad_norm_tensor_parallel_(nn::Module& model, double max_norm, ProcessGroup& tp);

// model.state_dict() with every split Linear gathered whole: the state_dict of the model before
// parallelize_tensor, on every rank (a collective over each split Linear's group). Checkpoints save
// this, so that a run saved at one layout resumes at another (load it into the plain model, then
// split it).
nn::StateDict whole_state_dict(nn::Module& model);

}  // namespace loom::distributed
