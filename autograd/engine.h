// The backward engine: from the root, count how many edges reach each node, then run nodes from
// a ready queue (latest-created first, so gradients flow in reverse order of the forward), summing
// the gradients that arrive at each node before running it. Leaves get their gradient added into
// .grad, then their post-accumulate hooks run; callbacks queued during the pass run at its end.
// Leaves out: multithreaded backward across devices (one thread runs the whole pass).
#pragma once

#include <functional>

#include "core/tensor.h"

namespace loom::autograd {

// Computes gradients of `root` (grad_root defaults to ones for a one-element root).
void backward(const Tensor& root, const Tensor& grad_root = Tensor(), bool retain_graph = false);

// A pass inside a running backward function, from `root` (a graph that function built, with
// grad mode on, from detached inputs) with gradient grad_root: leaves it reaches get their .grad
// and hooks as in any pass; callbacks it queues join the outer pass's, run at its end. What
// activation checkpointing (autograd/checkpoint.h) recomputes its block's backward with. The
// recomputed graph is freed as it runs (no retain_graph).
void backward_nested(const Tensor& root, const Tensor& grad_root);

// Registers a hook that runs after a backward pass has added into this leaf's .grad.
// DDP starts a bucket's all-reduce from these hooks.
void register_post_accumulate_grad_hook(const Tensor& leaf, Hook hook);

// Queues a callback to run once the current backward pass has finished (only valid while a pass
// runs, e.g. from a hook). DDP waits for its all-reduces here.
void queue_callback(std::function<void()> cb);

// True while a backward pass runs on this thread.
bool in_backward();

}  // namespace loom::autograd
