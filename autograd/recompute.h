// Recomputed activations: an op whose output is cheap to make again from tensors its backward
// saves anyway (batch norm + ReLU from its input and statistics, GELU from its input) offers a
// recipe for it; a later op that saves that output for its own backward (the next convolution or
// Linear, for its weight gradient) keeps the recipe instead, and the output is rebuilt, bit for
// bit, when the backward first needs it. Off by default (set_recompute_activations).
// Leaves out: recomputing anything that costs a GEMM or a convolution (that is activation
// checkpointing, nn/checkpoint.h), and choosing what to recompute automatically (a min-cut over
// the graph, as torch.compile's partitioner does): the ops below are chosen by hand.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "core/tensor.h"

namespace loom::autograd {

// Note [Recomputed activations]
// In a ResNet bottleneck, y = relu(bn(x)) is saved twice over: batch norm keeps its input x (its
// backward needs it) and the next convolution keeps y (its weight gradient is dy^T y). In a
// transformer MLP, gelu keeps h and the second Linear keeps gelu(h). y can be made again from what
// is kept anyway for the price of one elementwise pass, so one activation per such pair need not
// stay in memory from the forward to the backward: about a sixth of ResNet-50's activations and a
// fifth of a ViT's.
//
// How: with the switch on, the op attaches a Recompute to its output's storage: a function of
// tensors it saved (each a Saved, so an in-place change of them is still an error) that returns
// the output again, bit for bit (the same kernel: Backend::batch_norm_apply, the same unary op;
// linear's GELU epilogue is the one exception, a cuBLASLt epilogue against the elementwise kernel,
// equal to rounding). Saved (autograd/function.h) checks every tensor it saves: if its storage
// carries a recipe and has not been written since the op made it (its version), it keeps the
// recipe and the view's geometry instead of the tensor, so the storage is freed when the forward
// drops it. Saved::get() rebuilds it once: the rebuilt tensor is shared by every Saved of that
// storage (the convolution's, and batch norm's own for the ReLU mask), and freed when the last of
// them is (their nodes are released as the backward runs them). An in-place change of the output
// after it was saved does not matter: the recipe gives back what was saved.
//
// Cost: one elementwise pass per recomputed activation in the backward (a read of the input, a
// write of the output), with the rebuilt tensor alive only between its first and last use. A
// program that holds on to such an output after the forward (to log it, say) also holds the
// recipe's inputs; with retain_graph the rebuilt outputs stay until the graph goes, as the saved
// tensors would have.
class Recompute {
 public:
  // `out`: the op's output, whose storage gets the recipe; `fn` makes it again.
  Recompute(const char* op, std::function<Tensor()> fn, const Tensor& out);
  const char* op() const { return op_; }
  uint64_t version() const { return version_; }
  DType dtype() const { return dtype_; }
  // The output again (made at the first call, then shared while a Saved uses it).
  Tensor materialize();
  void add_user();
  void drop_user();

 private:
  const char* op_;
  std::function<Tensor()> fn_;
  Shape sizes_;
  Strides strides_;
  int64_t offset_;
  DType dtype_;
  uint64_t version_;
  std::mutex mu_;
  Tensor cache_;
  int users_ = 0;
};

// One Saved's use of a recipe (shared by copies of that Saved): counts it as a user while it
// lives, and keeps the view of the rebuilt output that Saved::get() returns.
struct RecomputeUse {
  std::shared_ptr<Recompute> recipe;
  Shape sizes;  // the saved view of the output's storage
  Strides strides;
  int64_t offset;
  Tensor view;  // made at the first get()
  explicit RecomputeUse(std::shared_ptr<Recompute> r, const Tensor& t);
  ~RecomputeUse();
  RecomputeUse(const RecomputeUse&) = delete;
  RecomputeUse& operator=(const RecomputeUse&) = delete;
};

// The switch (process-wide; off by default): whether ops offer recipes.
bool recompute_activations();
void set_recompute_activations(bool on);

class RecomputeActivationsGuard {
 public:
  explicit RecomputeActivationsGuard(bool on) : prev_(recompute_activations()) {
    set_recompute_activations(on);
  }
  ~RecomputeActivationsGuard() { set_recompute_activations(prev_); }
  RecomputeActivationsGuard(const RecomputeActivationsGuard&) = delete;
  RecomputeActivationsGuard& operator=(const RecomputeActivationsGuard&) = delete;

 private:
  bool prev_;
};

// Attaches `fn` as the recipe of `out` (an op's fresh output, before it is saved or recorded)
// when the switch is on and the op joins the graph (one of its `inputs` requires grad); else does
// nothing.
void offer_recompute(const char* op, const Tensor& out, const std::vector<Tensor>& inputs,
                     std::function<Tensor()> fn);

// The recipe a tensor saved now would keep instead of itself (null: none, or its storage was
// written after the op made it).
std::shared_ptr<Recompute> recipe_of(const Tensor& t);

}  // namespace loom::autograd
