// Node: one recorded op in the autograd graph. It holds the backward function (gradient of its
// one output -> gradients of its inputs) and one edge per input, pointing at the node that
// produced that input (or at the AccumulateGrad node of a leaf). Nodes are owned by the tensors
// they produced (grad_fn) and by the edges of later nodes, so the graph lives exactly as long as
// something can still backward through it.
// Leaves out: multi-output nodes (every loom op has one differentiable output) and double
// backward (the backward functions run with grad mode off).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::autograd {

using Grads = std::vector<Tensor>;  // one per input; undefined = no gradient for that input
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

struct Node;

struct Edge {
  std::shared_ptr<Node> node;  // null when the input needs no gradient
};

struct Node {
  const char* name;                 // the op, for errors ("mul", "conv2d")
  uint64_t sequence_nr;             // creation order: backward runs later nodes first
  BackwardFn backward;              // released after a backward without retain_graph
  std::vector<Edge> next;           // one per input of the op
  std::vector<Shape> input_shapes;  // to check the gradients the backward returns
  // Set only on AccumulateGrad nodes: the leaf whose .grad they update. (The leaf holds its
  // accumulator weakly, so this strong reference makes no cycle.)
  Tensor leaf;
  // Anomaly mode only (autograd/anomaly.h): where the forward recorded this node, for errors.
  std::string forward_context;
  bool is_accumulate_grad() const { return leaf.defined(); }

  Node(const char* n, uint64_t seq) : name(n), sequence_nr(seq) {}
};

// The AccumulateGrad node of a leaf that requires grad (created once, cached on the leaf).
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

uint64_t next_sequence_nr();

}  // namespace loom::autograd
