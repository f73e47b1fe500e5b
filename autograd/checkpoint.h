// Activation checkpointing: run a block without keeping its activations, and recompute them in
// backward (torch.utils.checkpoint's non-reentrant idea, written for loom's engine).
// Leaves out: blocks with several outputs, keyword-style arguments, and saving some activations
// selectively (every activation inside the block is recomputed).
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

// Note [Activation checkpointing]
// checkpoint(fn, inputs) returns fn(inputs), computed with grad mode off, so none of the block's
// intermediate tensors are saved: the graph holds one "checkpoint" node whose only saved tensors
// are the inputs. Its backward recomputes fn on detached copies of the inputs with grad mode on,
// under the autocast dtype the forward had and with the default generator put back to the state
// the forward started from (dropout draws the same mask, then the generator is left where the
// forward had left it), and runs that graph's backward inside the outer pass
// (autograd::backward_nested): the block's parameters get their gradients there (their hooks
// fire, DDP sees them as usual), the inputs' gradients are returned. Memory: a block's
// activations live only while its backward runs, for one more forward's time (GPT-2 124M at
// B 16, T 1024: about 450 MB a block). Same values, bit for bit on the CPU: the recomputation
// runs the same kernels on the same inputs.
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs);

}  // namespace loom::autograd
