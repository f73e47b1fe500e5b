// record(), Saved, and the AccumulateGrad node of a leaf.
#include "autograd/function.h"

#include <atomic>

#include "autograd/anomaly.h"
#include "autograd/recompute.h"

namespace loom::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter++;
}

Saved::Saved(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  if (std::shared_ptr<Recompute> r = recipe_of(t)) {  // Note [Recomputed activations]
    recompute_ = std::make_shared<RecomputeUse>(std::move(r), t);
    return;
  }
  t_ = t.detach();  // an alias without grad_fn: no reference cycle through the graph
  version_ = t.version();
}

const Tensor& Saved::get() const {
  if (recompute_) {
    RecomputeUse& u = *recompute_;
    if (!u.view.defined())
      u.view = make_view(u.recipe->materialize(), u.sizes, u.strides, u.offset);
    return u.view;
  }
  if (t_.defined()) {
    LOOM_CHECK(t_.version() == version_, op_, ": a tensor (", describe(t_),
               ") saved for the backward pass was modified in place (its version went from ",
               version_, " to ", t_.version(), "); compute on a clone() instead");
  }
  return t_;
}

bool any_requires_grad(std::initializer_list<Tensor> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

namespace {

std::string count_text(const NonFiniteCount& c, const Tensor& t) {
  return str(c.nan, " NaN and ", c.inf, " Inf among its ", t.numel(), " values (", describe(t),
             ")");
}

// Note [Anomaly checks]
// In anomaly mode record() checks each recorded op's output; the engine checks each gradient a
// backward function returns. Both read the values back (a device sync per op), which is why the
// mode is off by default. The forward check blames the op only when all its inputs were finite;
// otherwise the NaN came from outside the graph (a leaf, an input, an op run without grad) and the
// error says which input. The node keeps its forward context so that a backward error can name
// where the forward was recorded.
void check_forward_output(const Node& node, const Tensor& out, const std::vector<Tensor>& inputs) {
  NonFiniteCount c = count_nonfinite(out);
  if (!c.any()) return;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NonFiniteCount ci = count_nonfinite(inputs[i]);
    LOOM_CHECK(!ci.any(), "detect_anomaly: input ", i, " of the forward of ", node.forward_context,
               " already held ", count_text(ci, inputs[i]),
               " (made outside the autograd graph: a leaf, the data, or an op run without grad)");
  }
  LOOM_FAIL("detect_anomaly: the forward of ", node.forward_context, " produced ",
            count_text(c, out), " from finite inputs");
}

}  // namespace

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = leaf.ensure_autograd_meta();
  if (auto existing = m.grad_accumulator.lock()) return existing;
  auto node = std::make_shared<Node>("AccumulateGrad", next_sequence_nr());
  node->leaf = leaf;
  m.grad_accumulator = node;
  return node;
}

Tensor record(const char* op, Tensor out, const std::vector<Tensor>& inputs, BackwardFn backward) {
  if (!any_requires_grad(inputs)) return out;
  for (const Tensor& in : inputs) {
    // An op that returned one of its inputs unchanged (contiguous() of a contiguous tensor):
    // give the result its own impl so the input keeps its own history.
    if (in.is_same(out)) out = out.detach();
  }
  auto node = std::make_shared<Node>(op, next_sequence_nr());
  node->backward = std::move(backward);
  node->next.reserve(inputs.size());
  node->input_shapes.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined() && in.requires_grad())
      e.node = in.is_leaf() ? grad_accumulator(in) : in.grad_fn();
    node->next.push_back(std::move(e));
    node->input_shapes.push_back(in.defined() ? in.shape() : Shape{});
  }
  AutogradMeta& m = out.ensure_autograd_meta();
  m.requires_grad = true;
  if (is_anomaly_enabled()) {  // Note [Anomaly checks]
    std::string where = anomaly_scope_path();
    node->forward_context = str("'", op, "' (op #", node->sequence_nr, ", recorded in ",
                                where.empty() ? std::string("no module or scope") : where, ")");
    check_forward_output(*node, out, inputs);
  }
  m.grad_fn = std::move(node);
  return out;
}

}  // namespace loom::autograd
