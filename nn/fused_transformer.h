// The fused transformer modules that nn::fuse (nn/fuse.h) swaps into GPT and the Vision
// Transformer in place of the plain ones of nn/transformer.h: FusedAddLayerNorm, LinearGELULinear,
// FusedTransformerBlock and FusedTransformerStack. Same tensors, same state_dict keys, same values
// and gradients as the plain model, in fewer passes (Note [The fused transformer]).
// Leaves out: which models get them (nn/fuse_transformer.cpp) and the fused ops (autograd/ops).
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "nn/fused.h"
#include "nn/transformer.h"

namespace loom::nn {

// Note [The fused transformer]
// The plain block runs x + attn(ln_1(x)), then + mlp(ln_2(.)): per block two adds, two layer
// norms, and an MLP of three ops. Fused, with the same children under the same names:
// - a residual add and the layer norm after it run as one op, add_layer_norm (Note [Layer norm
//   with the residual add] in autograd/ops/layer_norm.cpp): the attention's add with ln_2 inside
//   the block; the MLP's add with the *next* block's ln_1, or, after the last block, with the
//   model's final norm. That add crosses a module boundary, so the stack runs the chain:
//   FusedTransformerStack hands each block's MLP output, not yet added, to the next block
//   (FusedTransformerBlock::forward_parts), and the last one to the final norm;
// - each layer norm writes its output in the autocast dtype, the cast the Linear after it would
//   make (loom::layer_norm's y_dtype);
// - the MLP with the tanh GELU is one op, gelu_mlp (Note [Fused MLP] in autograd/ops/linalg.cpp):
//   bias and GELU in the first GEMM's epilogue, the GELU's backward in the epilogue of the GEMM
//   that makes its incoming gradient. The exact GELU (ViT) has no such epilogue: its MLP stays.
// With activation checkpointing (or a KV cache) each block runs alone, as FusedTransformerBlock's
// forward: ln_2 still takes the attention's add, the MLP's add is a plain add, and the final norm
// is a layer norm. The plain model is the oracle: tests/nn/test_fused_transformer.cpp compares
// the two, loss and every gradient.

// A LayerNorm that also runs the residual add before it when its caller has one (forward_add),
// and writes its output in the autocast dtype. Lists the LayerNorm's weight and bias as its own
// (Note [Fused modules keep the unfused keys] in nn/fused.h). x: (..., C) -> (..., C).
class FusedAddLayerNorm : public FusedModule {
 public:
  explicit FusedAddLayerNorm(std::shared_ptr<LayerNorm> ln);
  // layer_norm(x), in the autocast dtype under autocast.
  Tensor forward(const Tensor& x) override;
  // {r, layer_norm(r)} with r = x + branch, in one pass (loom::add_layer_norm).
  std::pair<Tensor, Tensor> forward_add(const Tensor& x, const Tensor& branch);

  const std::shared_ptr<LayerNorm> ln;
};

// An MLP with the tanh GELU as one op: dropout(gelu_mlp(x, c_fc, c_proj)). Its children are the
// MLP's c_fc, c_proj and dropout (the same modules and keys); the GELU runs in c_fc's epilogue
// and has no module of its own. Anomaly mode runs the MLP. x: (B, T, C) -> (B, T, C).
class LinearGELULinear : public Module {
 public:
  explicit LinearGELULinear(std::shared_ptr<MLP> mlp);
  Tensor forward(const Tensor& x) override;
  void train(bool on = true) override;      // the MLP's own flag too
  std::string extra_repr() const override;  // what runs as the one op

  const std::shared_ptr<MLP> mlp;  // the plain MLP (not a child: no keys of its own)
  ModuleHolder<Linear> c_fc, c_proj;
  ModuleHolder<Dropout> dropout;
};

// A TransformerBlock whose ln_1 and ln_2 are FusedAddLayerNorms and whose MLP is a
// LinearGELULinear when its GELU is tanh (Note [The fused transformer]). (B, T, C) -> (B, T, C).
class FusedTransformerBlock : public TransformerBlock {
 public:
  explicit FusedTransformerBlock(const TransformerBlock& plain);
  // Whether `plain` can be fused: pre-norm, both norms LayerNorms.
  static bool fusable(const TransformerBlock& plain);

  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, KVCache& cache, size_t layer) override;
  // The block with its last residual add left to the caller: returns {r, m}, the block's output
  // being r + m (r the residual stream after attention, m the MLP's output). `pending` (or
  // undefined) is the previous block's m, which ln_1 adds to x in its pass. Runs through the
  // block's forward hooks (Note [Forward hooks] in nn/module.h), which see both parts.
  std::pair<Tensor, Tensor> forward_parts(const Tensor& x, const Tensor& pending);
  std::string extra_repr() const override;

  const std::shared_ptr<FusedAddLayerNorm> norm_1, norm_2;  // ln_1 and ln_2, as their type

 private:
  std::pair<Tensor, Tensor> parts(const Tensor& x, const Tensor& pending);  // without the hooks
};

// A TransformerStack of FusedTransformerBlocks whose forward(x, final_norm) chains them: each
// block's MLP output is added to the residual stream by the next block's ln_1, the last one by
// final_norm when it is a FusedAddLayerNorm (Note [The fused transformer]). Checkpointing runs
// the blocks one by one, as the plain stack does.
class FusedTransformerStack : public TransformerStack {
 public:
  explicit FusedTransformerStack(const TransformerStack& plain);
  // Whether every block of `plain` can be fused.
  static bool fusable(const TransformerStack& plain);

  using TransformerStack::forward;
  Tensor forward(const Tensor& x, Module& final_norm) override;
  std::string extra_repr() const override;
};

}  // namespace loom::nn
