// The tensor-parallel plan for transformer blocks (distributed/tensor_parallel/tensor_parallel.h,
// Note [The tensor-parallel plan]): the walk that splits attention and MLPs, the clip over the
// whole model and the unsharded state_dict. Leaves out: the split Linears themselves (tp_linear.h).
#include "distributed/tensor_parallel/tensor_parallel.h"

#include <cmath>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "distributed/tensor_parallel/sequence_parallel.h"
#include "distributed/tensor_parallel/tp_linear.h"
#include "distributed/tensor_parallel/vocab_parallel.h"
#include "nn/fused_transformer.h"
#include "nn/transformer.h"

namespace loom::distributed {

namespace {

using Shares = std::vector<std::vector<RowRange>>;  // per rank: its rows of the whole weight

std::string child_path(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

void refuse_lora(const nn::Linear& l, const std::string& path) {
  LOOM_CHECK(!l.lora_A, "parallelize_tensor: ", path, " has low-rank adapters; split the model ",
             "first, or merge the adapters (nn/lora.h)");
}

// Swaps m's c_fc and c_proj (MLP or SwiGLUMLP) for split ones: c_fc keeps `rows` of each rank,
// c_proj this rank's `units` hidden columns.
template <typename M>
void split_pair(M& m, const Shares& rows, RowRange units, const std::string& path,
                const std::shared_ptr<ProcessGroup>& tp) {
  refuse_lora(*m.c_fc, path + ".c_fc");
  refuse_lora(*m.c_proj, path + ".c_proj");
  auto c_fc = std::make_shared<ColumnParallelLinear>(*m.c_fc, rows, tp);
  auto c_proj = std::make_shared<RowParallelLinear>(*m.c_proj, units.start, units.count, tp);
  m.replace_child("c_fc", c_fc);
  m.c_fc = c_fc;
  m.replace_child("c_proj", c_proj);
  m.c_proj = c_proj;
}

// q rows of rank r's query heads, then the k and v rows of its key/value heads.
int split_attention(nn::SelfAttention& a, const std::string& path,
                    const std::shared_ptr<ProcessGroup>& tp) {
  const int t = tp->size();
  const int64_t H = a.n_head, Hkv = a.n_kv_head, D = a.head_dim;
  const std::string q_what = "query heads of " + path, kv_what = "key/value heads of " + path;
  Shares rows;
  for (int r = 0; r < t; ++r) {
    RowRange q = even_share(H, t, r, q_what.c_str()), kv = even_share(Hkv, t, r, kv_what.c_str());
    rows.push_back({{q.start * D, q.count * D},
                    {H * D + kv.start * D, kv.count * D},
                    {(H + Hkv) * D + kv.start * D, kv.count * D}});
  }
  refuse_lora(*a.c_attn, path + ".c_attn");
  refuse_lora(*a.c_proj, path + ".c_proj");
  const RowRange mine = even_share(H, t, tp->rank(), q_what.c_str());
  auto c_attn = std::make_shared<ColumnParallelLinear>(*a.c_attn, rows, tp);
  auto c_proj = std::make_shared<RowParallelLinear>(*a.c_proj, mine.start * D, mine.count * D, tp);
  a.replace_child("c_attn", c_attn);
  a.c_attn = c_attn;
  a.replace_child("c_proj", c_proj);
  a.c_proj = c_proj;
  a.n_head = H / t;
  a.n_kv_head = Hkv / t;
  return 2;
}

// Hidden units [r F/t, (r+1) F/t) of F, at `offsets` within c_fc's rows (SwiGLU: gate's and up's).
Shares unit_rows(int64_t F, int t, const std::vector<int64_t>& offsets, const std::string& what) {
  Shares rows;
  for (int r = 0; r < t; ++r) {
    RowRange u = even_share(F, t, r, what.c_str());
    rows.emplace_back();
    for (int64_t o : offsets) rows.back().push_back({o + u.start, u.count});
  }
  return rows;
}

int split_module(nn::Module& m, const std::string& path, const std::shared_ptr<ProcessGroup>& tp) {
  const int t = tp->size();
  if (auto* a = dynamic_cast<nn::SelfAttention*>(&m)) return split_attention(*a, path, tp);
  if (auto* mlp = dynamic_cast<nn::MLP*>(&m)) {
    const int64_t F = mlp->c_fc->out_features;
    const std::string what = "hidden units of " + path;
    split_pair(*mlp, unit_rows(F, t, {0}, what), even_share(F, t, tp->rank(), what.c_str()), path,
               tp);
    return 2;
  }
  if (auto* s = dynamic_cast<nn::SwiGLUMLP*>(&m)) {
    const int64_t F = s->hidden;
    const std::string what = "hidden units of " + path;
    split_pair(*s, unit_rows(F, t, {0, F}, what), even_share(F, t, tp->rank(), what.c_str()), path,
               tp);
    s->hidden = F / t;
    return 2;
  }
  LOOM_CHECK(dynamic_cast<nn::LinearGELULinear*>(&m) == nullptr, "parallelize_tensor: ", path,
             " is a fused MLP (nn::fuse); split the plain model, then fuse");
  int n = 0;
  for (const auto& [name, child] : m.named_children())
    n += split_module(*child, child_path(path, name), tp);
  return n;
}

// Every split module of type L (a Linear or the embedding) of the model with its dotted name.
template <typename L>
std::vector<std::pair<std::string, const L*>> split_linears(const nn::Module& model) {
  std::vector<std::pair<std::string, const L*>> out;
  for (const auto& [name, m] : model.named_modules())
    if (auto* l = dynamic_cast<const L*>(m.get())) out.emplace_back(name, l);
  return out;
}

}  // namespace

int parallelize_tensor(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp,
                       TensorParallelOptions options) {
  LOOM_CHECK(tp != nullptr, "parallelize_tensor: the tensor-parallel group is null");
  if (tp->size() == 1) return 0;
  const int split = split_module(model, "", tp);
  if (options.sequence_parallel) apply_sequence_parallel(model, tp);
  return split;
}

namespace {

// The tensors every tp rank holds a different share of (Note [The tensor-parallel plan]).
std::unordered_set<const TensorImpl*> shard_tensors(nn::Module& model) {
  std::unordered_set<const TensorImpl*> out;
  for (const auto& [name, l] : split_linears<ColumnParallelLinear>(model)) {
    out.insert(l->weight.impl());
    if (l->bias.defined()) out.insert(l->bias.impl());
  }
  for (const auto& [name, l] : split_linears<RowParallelLinear>(model))
    out.insert(l->weight.impl());
  for (const auto& [name, e] : split_linears<VocabParallelEmbedding>(model))
    out.insert(e->weight.impl());
  return out;
}

}  // namespace

bool is_tensor_parallel_shard(nn::Module& model, const Tensor& p) {
  return shard_tensors(model).count(p.impl()) > 0;
}

Tensor clip_grad_norm_tensor_parallel_(nn::Module& model, double max_norm, ProcessGroup& tp) {
  autograd::NoGradGuard no_grad;
  Tensor shards, whole;  // sums of squares: of the shards' gradients, of the whole ones'
  std::vector<Tensor> grads;
  const std::unordered_set<const TensorImpl*> split = shard_tensors(model);
  for (const Tensor& p : model.parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    Tensor sq = sum(g * g);
    Tensor& acc = split.count(p.impl()) ? shards : whole;
    acc = acc.defined() ? acc + sq : sq;
  }
  LOOM_CHECK(!grads.empty(), "clip_grad_norm_tensor_parallel_: no parameter has a gradient");
  const Options where{.dtype = grads[0].dtype(), .device = grads[0].device()};
  shards = shards.defined() ? contiguous(shards) : scalar_tensor(0.0, where);
  tp.all_reduce(shards, ReduceOp::Sum)->wait();  // every rank's shards: the split Linears whole
  Tensor total = sqrt(whole.defined() ? shards + whole : shards);
  Tensor coef = minimum(rdiv(total + 1e-6, max_norm), scalar_tensor(1.0, where));
  for (Tensor& g : grads) g.mul_(coef);
  return total;
}

nn::StateDict whole_state_dict(nn::Module& model) {
  nn::StateDict sd = model.state_dict();
  auto put = [&sd](const std::string& name, Tensor t) {
    for (auto& [n, v] : sd)
      if (n == name) v = std::move(t);
  };
  for (const auto& [name, l] : split_linears<ColumnParallelLinear>(model)) {
    put(child_path(name, "weight"), gather_whole_weight(*l));
    if (l->bias.defined()) put(child_path(name, "bias"), gather_whole_bias(*l));
  }
  for (const auto& [name, l] : split_linears<RowParallelLinear>(model))
    put(child_path(name, "weight"), gather_whole_weight(*l));
  for (const auto& [name, e] : split_linears<VocabParallelEmbedding>(model))
    put(child_path(name, "weight"), gather_whole_weight(*e));
  return sd;
}

}  // namespace loom::distributed
