// The backward engine. See autograd/engine.h for the algorithm.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "autograd/amp/autocast.h"
#include "autograd/anomaly.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"

namespace loom::autograd {

namespace {

thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;
thread_local const Node* t_running = nullptr;  // the node whose backward runs now
thread_local bool t_retain = false;            // that backward's retain_graph
// The running pass's gradient sums per node, and the sums the running backward took from them
// (Note [Taking the pending gradient] in autograd/function.h), by input index.
thread_local std::unordered_map<Node*, Tensor>* t_pending = nullptr;
thread_local std::vector<std::pair<size_t, Tensor>>* t_taken = nullptr;

struct ByLatest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Adds g into the leaf's .grad and runs the leaf's hooks.
void accumulate(const Node& acc, Tensor g) {
  const Tensor& leaf = acc.leaf;
  AutogradMeta& m = leaf.ensure_autograd_meta();
  if (!m.grad.defined()) {
    // Take the gradient as is when nothing else holds it; otherwise copy, so that later in-place
    // accumulation never writes into a tensor the user or another node can see.
    bool owned = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
    m.grad = owned ? g : g.clone();
  } else {
    m.grad.add_(g);
  }
  for (const Hook& h : m.post_accumulate_hooks) h(leaf);
}

// Anomaly mode: the first gradient with a NaN or an Inf names the node's op and where its forward
// was recorded (Note [Anomaly checks] in autograd/function.cpp).
void check_backward_grads(const Node& n, const Grads& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    NonFiniteCount c = count_nonfinite(grads[i]);
    LOOM_CHECK(!c.any(), "detect_anomaly: the backward of ",
               n.forward_context.empty() ? str("'", n.name, "'") : n.forward_context, " returned ",
               c.nan, " NaN and ", c.inf, " Inf in the gradient for its input ", i, " (",
               describe(grads[i]), ")",
               n.forward_context.empty() ? " (its forward ran before anomaly mode was on)" : "");
  }
}

}  // namespace

bool in_backward() { return t_callbacks != nullptr; }

bool needs_input_grad(size_t i) {
  return t_running == nullptr || (i < t_running->next.size() && t_running->next[i].node != nullptr);
}

bool saved_tensors_freed_after() { return t_running != nullptr && !t_retain; }

Tensor take_pending_grad(size_t i, DType dtype) {
  if (t_running == nullptr || t_pending == nullptr || t_taken == nullptr ||
      i >= t_running->next.size() || !t_running->next[i].node)
    return Tensor();
  auto it = t_pending->find(t_running->next[i].node.get());
  if (it == t_pending->end() || !it->second.defined() || it->second.dtype() != dtype ||
      !it->second.is_contiguous())
    return Tensor();
  for (const auto& taken : *t_taken)
    if (taken.first == i) return Tensor();  // one take per input
  Tensor g = std::move(it->second);         // the slot is empty until this node's grads arrive
  it->second = Tensor();
  t_taken->emplace_back(i, g);
  return g;
}

void queue_callback(std::function<void()> cb) {
  LOOM_CHECK(t_callbacks != nullptr, "queue_callback: no backward pass is running on this thread");
  t_callbacks->push_back(std::move(cb));
}

void register_post_accumulate_grad_hook(const Tensor& leaf, Hook hook) {
  LOOM_CHECK(
      leaf.is_leaf() && leaf.requires_grad(),
      "register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad, got ",
      describe(leaf), leaf.is_leaf() ? " that does not require grad" : " made by an op");
  leaf.ensure_autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

namespace {
void run_graph(const Tensor& root, const Tensor& g0, bool retain_graph);
}  // namespace

void backward(const Tensor& root, const Tensor& grad_root, bool retain_graph) {
  LOOM_CHECK(root.defined(), "backward: the tensor is undefined");
  LOOM_CHECK(root.requires_grad(), "backward: ", describe(root),
             " does not require grad and has no grad_fn (did you compute it under NoGradGuard, or "
             "from tensors that do not require grad?)");
  LOOM_CHECK(t_callbacks == nullptr, "backward: called from inside another backward pass");
  Tensor g0 = grad_root;
  if (!g0.defined()) {
    LOOM_CHECK(root.numel() == 1,
               "backward: grad can be implied only for a one-element output, got ", describe(root),
               "; pass a gradient of the same shape");
    g0 = ones_like(root);
  }
  LOOM_CHECK(g0.shape() == root.shape(), "backward: gradient ", describe(g0), " does not match ",
             describe(root));

  std::vector<std::function<void()>> callbacks;
  t_callbacks = &callbacks;
  try {
    run_graph(root, g0, retain_graph);
  } catch (...) {
    t_callbacks = nullptr;
    throw;
  }
  t_callbacks = nullptr;
  for (auto& cb : callbacks) cb();
}

void backward_nested(const Tensor& root, const Tensor& grad_root) {
  LOOM_CHECK(t_callbacks != nullptr && t_running != nullptr,
             "backward_nested: only a node's backward function may call it");
  LOOM_CHECK(root.defined() && root.requires_grad() && grad_root.shape() == root.shape(),
             "backward_nested: root ", root.defined() ? describe(root) : std::string("undefined"),
             " needs a gradient of its shape, got ", describe(grad_root));
  const Node* outer = t_running;
  const bool outer_retain = t_retain;
  auto* outer_pending = t_pending;
  auto* outer_taken = t_taken;
  auto restore = [&] {
    t_running = outer, t_retain = outer_retain, t_pending = outer_pending, t_taken = outer_taken;
  };
  try {
    run_graph(root, grad_root, false);
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

namespace {

// 1. Count the edges that reach each node from root (iterative DFS; the graph can be deep).
std::unordered_map<Node*, int> count_dependencies(Node* root) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{root};
  deps[root] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      auto [it, inserted] = deps.try_emplace(e.node.get(), 0);
      ++it->second;
      if (inserted) stack.push_back(e.node.get());
    }
  }
  return deps;
}

// The state of step 2: edges still to arrive, gradients summed so far, nodes ready to run.
struct Pass {
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, Tensor> pending;
  std::priority_queue<Node*, std::vector<Node*>, ByLatest> ready;
  bool retain_graph = false;

  bool has_gradient(Node* n) { return pending.count(n) && pending[n].defined(); }
};

// A node all of whose edges arrived without a gradient: nothing flows further down this path,
// but its inputs still wait on it, so they are released as if it had run with no gradient.
void release_unreached(Pass& pass, Node* node) {
  pass.pending.erase(node);
  std::vector<Node*> skip{node};
  while (!skip.empty()) {
    Node* s = skip.back();
    skip.pop_back();
    for (const Edge& e : s->next) {
      if (!e.node) continue;
      if (--pass.deps[e.node.get()] > 0) continue;
      if (pass.has_gradient(e.node.get()))
        pass.ready.push(e.node.get());
      else
        skip.push_back(e.node.get());
    }
  }
}

// Runs node n's backward on its summed gradient g and passes each input's gradient on.
void run_node(Pass& pass, Node* n, const Tensor& g) {
  LOOM_CHECK(n->backward != nullptr,
             "backward: trying to backward through the graph a second time ", "(through '", n->name,
             "'); its saved tensors were freed after the first backward. ",
             "Pass retain_graph = true to the first backward if you need to backward twice");
  std::vector<std::pair<size_t, Tensor>> taken;
  t_running = n, t_pending = &pass.pending, t_taken = &taken;
  Grads grads = n->backward(g);
  t_running = nullptr, t_pending = nullptr, t_taken = nullptr;
  LOOM_CHECK(grads.size() == n->next.size(), n->name, ": backward returned ", grads.size(),
             " gradients for ", n->next.size(), " inputs");
  for (auto& [i, sum] : taken)  // a taken sum the backward did not use goes back
    if (!grads[i].defined()) grads[i] = std::move(sum);
  if (!pass.retain_graph) n->backward = nullptr;  // frees the saved tensors
  if (is_anomaly_enabled()) check_backward_grads(*n, grads);
  for (size_t i = 0; i < grads.size(); ++i) {
    Node* next = n->next[i].node.get();
    if (!next) continue;
    if (grads[i].defined()) {
      LOOM_CHECK(grads[i].shape() == n->input_shapes[i], n->name,
                 ": backward returned a gradient of shape ", grads[i].shape(), " for input ", i,
                 " of shape ", n->input_shapes[i]);
      Tensor& slot = pass.pending[next];
      slot = slot.defined() ? add(slot, grads[i]) : grads[i];
    }
    if (--pass.deps[next] > 0) continue;
    if (pass.has_gradient(next))
      pass.ready.push(next);
    else
      release_unreached(pass, next);
  }
}

// Steps 1 and 2 of a pass from root with gradient g0 (Note at the top of engine.h); the caller
// owns t_callbacks.
void run_graph(const Tensor& root, const Tensor& g0, bool retain_graph) {
  NoGradGuard no_grad;                      // the backward functions themselves are not recorded
  amp::Autocast no_autocast(std::nullopt);  // nor autocast (Note [Autocast policy])
  std::shared_ptr<Node> root_node = root.is_leaf() ? grad_accumulator(root) : root.grad_fn();
  Pass pass{count_dependencies(root_node.get()), {{root_node.get(), g0}}, {}, retain_graph};
  t_retain = retain_graph;
  pass.ready.push(root_node.get());  // 2. Run nodes whose gradients are complete, latest first.
  try {
    while (!pass.ready.empty()) {
      Node* n = pass.ready.top();
      pass.ready.pop();
      Tensor g = std::move(pass.pending[n]);
      pass.pending.erase(n);
      if (n->is_accumulate_grad())
        accumulate(*n, std::move(g));
      else
        run_node(pass, n, g);
    }
  } catch (...) {
    t_running = nullptr, t_pending = nullptr, t_taken = nullptr;
    throw;
  }
}

}  // namespace

}  // namespace loom::autograd

namespace loom {
void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward(*this, grad, retain_graph);
}
}  // namespace loom
