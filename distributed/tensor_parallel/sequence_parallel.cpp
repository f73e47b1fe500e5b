// Sequence parallelism (distributed/tensor_parallel/sequence_parallel.h, Note [Sequence
// parallel]): the stack that splits and gathers the sequence, the dropout with a draw per rank, the
// switch of a split model's blocks, and the all-reduce of the norms' partial gradients. Leaves out:
// the collectives as autograd ops (tp_regions.cpp) and the splitting of the Linears
// (tensor_parallel.cpp).
#include "distributed/tensor_parallel/sequence_parallel.h"

#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/ops.h"
#include "distributed/tensor_parallel/tp_linear.h"
#include "distributed/tensor_parallel/tp_regions.h"
#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::distributed {

namespace {

std::shared_ptr<ProcessGroup> checked(std::shared_ptr<ProcessGroup> tp, const char* who) {
  LOOM_CHECK(tp != nullptr, who, ": the tensor-parallel group is null");
  return tp;
}

}  // namespace

// ---------------------------------------------------------------- the stack

SequenceParallelStack::SequenceParallelStack(const nn::TransformerStack& plain,
                                             std::shared_ptr<ProcessGroup> group)
    : nn::TransformerStack("SequenceParallelStack"),
      tp(checked(std::move(group), "SequenceParallelStack")) {
  for (size_t i = 0; i < plain.size(); ++i) push_back(plain.block(i));
  checkpointing = plain.checkpointing;
  Module::train(plain.is_training());
}

Tensor SequenceParallelStack::forward(const Tensor& x) {
  Tensor h = split_sequence(x, *tp);               // (B, T/tp, C): this rank's positions
  h = nn::TransformerStack::forward(h, Tensor());  // every block, on them
  return gather_sequence(h, *tp);                  // (B, T, C) on every rank
}

Tensor SequenceParallelStack::forward(const Tensor&, nn::Module&, nn::KVCache&) {
  LOOM_FAIL(
      "SequenceParallelStack: a KV cache's forward (one position at a time) is not sequence ",
      "parallel; generate with a model split without TensorParallelOptions::sequence_parallel");
}

std::string SequenceParallelStack::extra_repr() const {
  return str("each block on T/tp positions of the sequence, tp=", tp->size());
}

// ---------------------------------------------------------------- dropout

SequenceParallelDropout::SequenceParallelDropout(double p_, std::shared_ptr<ProcessGroup> group)
    : nn::Dropout(p_), tp(checked(std::move(group), "SequenceParallelDropout")) {}

// x (B, T/tp, C): the counters of tp such slices taken alike on every rank, block r used here.
Tensor SequenceParallelDropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  const uint64_t n = uint64_t(x.numel());
  const GeneratorState whole = default_generator().reserve(n * uint64_t(tp->size()));
  Generator mine;
  mine.set_state({whole.seed, whole.offset + uint64_t(tp->rank()) * n});
  return dropout(x, p, /*training=*/true, &mine);
}

std::string SequenceParallelDropout::extra_repr() const {
  return str("p=", p, ", a draw of its own on each of tp=", tp->size(), " ranks");
}

// ---------------------------------------------------------------- the switch

namespace {

template <typename L>
void set_sequence_parallel(const std::shared_ptr<nn::Linear>& l, const std::string& path) {
  auto* split = dynamic_cast<L*>(l.get());
  LOOM_CHECK(split != nullptr, "sequence parallel: ", path, " is a ", l->type_name(),
             ", not split by parallelize_tensor");
  split->sequence_parallel = true;
}

// d (a member holder of `parent`, registered as `name`) becomes a SequenceParallelDropout.
void swap_dropout(nn::Module& parent, const char* name, nn::ModuleHolder<nn::Dropout>& d,
                  const std::shared_ptr<ProcessGroup>& tp) {
  auto sp = std::make_shared<SequenceParallelDropout>(d->p, tp);
  sp->train(d->is_training());
  parent.replace_child(name, sp);
  d = sp;
}

// The block's split Linears gather and scatter along T; its residual dropouts draw per rank.
void switch_block(nn::TransformerBlock& b, const std::string& path,
                  const std::shared_ptr<ProcessGroup>& tp) {
  set_sequence_parallel<ColumnParallelLinear>(b.attn->c_attn, path + ".attn.c_attn");
  set_sequence_parallel<RowParallelLinear>(b.attn->c_proj, path + ".attn.c_proj");
  swap_dropout(*b.attn, "resid_dropout", b.attn->resid_dropout, tp);
  auto switch_mlp = [&](auto& m) {
    set_sequence_parallel<ColumnParallelLinear>(m.c_fc, path + ".mlp.c_fc");
    set_sequence_parallel<RowParallelLinear>(m.c_proj, path + ".mlp.c_proj");
    swap_dropout(m, "dropout", m.dropout, tp);
  };
  if (auto* mlp = dynamic_cast<nn::MLP*>(b.mlp.get())) return switch_mlp(*mlp);
  if (auto* swiglu = dynamic_cast<nn::SwiGLUMLP*>(b.mlp.get())) return switch_mlp(*swiglu);
  LOOM_FAIL("sequence parallel: ", path, ".mlp is a ", b.mlp->type_name(), ", not an MLP");
}

// The stack held by `holder`, registered in `model` as `name`, switched and swapped.
void switch_stack(nn::Module& model, const std::string& name,
                  nn::ModuleHolder<nn::TransformerStack>& holder,
                  const std::shared_ptr<ProcessGroup>& tp) {
  LOOM_CHECK(dynamic_cast<SequenceParallelStack*>(holder.get()) == nullptr,
             "sequence parallel: ", name, " is sequence parallel already");
  for (size_t i = 0; i < holder->size(); ++i)
    switch_block(*holder->block(i), name + "." + std::to_string(i), tp);
  auto sp = std::make_shared<SequenceParallelStack>(*holder, tp);
  model.replace_child(name, sp);
  holder = sp;
}

}  // namespace

void apply_sequence_parallel(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp) {
  checked(tp, "apply_sequence_parallel");
  if (auto* g = dynamic_cast<nn::GPT*>(&model)) return switch_stack(model, "h", g->h, tp);
  if (auto* l = dynamic_cast<nn::Llama*>(&model))
    return switch_stack(model, "layers", l->layers, tp);
  LOOM_FAIL("sequence parallel: splits the sequence of GPT and Llama models, not ",
            model.type_name());
}

// ---------------------------------------------------------------- the gradients

std::vector<Tensor> sequence_parallel_parameters(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const auto& [name, m] : model.named_modules()) {
    if (dynamic_cast<const SequenceParallelStack*>(m.get()) == nullptr) continue;
    for (const auto& [inner, sub] : m->named_modules()) {
      if (dynamic_cast<const ColumnParallelLinear*>(sub.get())) continue;  // shards
      if (auto* row = dynamic_cast<const RowParallelLinear*>(sub.get())) {
        if (row->bias.defined()) out.push_back(row->bias);  // added on the rank's positions
        continue;
      }
      for (const Tensor& p : sub->parameters(/*recurse=*/false)) out.push_back(p);
    }
  }
  return out;
}

void sync_sequence_parallel_grads(nn::Module& model, ProcessGroup& tp) {
  sync_sequence_parallel_grads(sequence_parallel_parameters(model), tp);
}

namespace {

// Sums each of `grads` over tp in place (one all-reduce of them all).
void sum_over_tp(std::vector<Tensor>& grads, ProcessGroup& tp) {
  if (grads.empty()) return;
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (const Tensor& g : grads) flat.push_back(reshape(g, {-1}));
  Tensor all = contiguous(cat(flat, 0));  // every partial gradient, one after another
  tp.all_reduce(all, ReduceOp::Sum)->wait();
  int64_t at = 0;
  for (Tensor& g : grads) {
    g.copy_(reshape(slice(all, 0, at, at + g.numel()), g.shape()));
    at += g.numel();
  }
}

}  // namespace

void sync_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& tp) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  sum_over_tp(grads, tp);
}

std::function<void(size_t, const std::vector<Tensor>&)> sequence_parallel_reduce_hook(
    const nn::Module& model, std::shared_ptr<ProcessGroup> tp) {
  std::unordered_set<const TensorImpl*> sp;
  for (const Tensor& p : sequence_parallel_parameters(model)) sp.insert(p.impl());
  return [sp, tp](size_t unit, const std::vector<Tensor>& params) {
    if (unit == 0) return;
    std::vector<Tensor> partial;
    for (const Tensor& p : params)
      if (sp.count(p.impl())) partial.push_back(p);
    sync_sequence_parallel_grads(partial, *tp);  // nothing without a gradient, on every tp rank
  };
}

std::function<void(const std::vector<Tensor>&, const std::vector<Tensor>&)>
sequence_parallel_bucket_hook(const nn::Module& model, std::shared_ptr<ProcessGroup> tp) {
  std::unordered_set<const TensorImpl*> sp;
  for (const Tensor& p : sequence_parallel_parameters(model)) sp.insert(p.impl());
  return [sp, tp](const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
    std::vector<Tensor> partial;  // the bucket's views of the norms' gradients
    for (size_t k = 0; k < params.size(); ++k)
      if (sp.count(params[k].impl())) partial.push_back(grads[k]);
    sum_over_tp(partial, *tp);  // every tp rank's buckets hold the same parameters, in order
  };
}

}  // namespace loom::distributed
