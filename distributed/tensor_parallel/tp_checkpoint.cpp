// A tensor-parallel model's state in the whole layout: see tp_checkpoint.h.
#include "distributed/tensor_parallel/tp_checkpoint.h"

#include <string>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/error.h"
#include "distributed/tensor_parallel/vocab_parallel.h"

namespace loom::distributed {

namespace {

// Each rank r's one range [r n, (r + 1) n) of the whole: a row-parallel weight's columns, the
// embedding's rows.
std::vector<std::vector<RowRange>> even_ranges(int64_t n, int ranks) {
  std::vector<std::vector<RowRange>> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) out[size_t(r)] = {{int64_t(r) * n, n}};
  return out;
}

// t with `dim` moved first (dim 1 of a matrix: its transpose), contiguous.
Tensor dim_first(const Tensor& t, int dim) {
  return dim == 0 ? contiguous(t) : contiguous(transpose(t, 0, 1));
}

}  // namespace

std::unordered_map<const TensorImpl*, TensorShare> tensor_shares(nn::Module& model) {
  std::unordered_map<const TensorImpl*, TensorShare> out;
  for (const auto& [name, m] : model.named_modules()) {
    if (auto* c = dynamic_cast<const ColumnParallelLinear*>(m.get())) {
      TensorShare s{
          .dim = 0, .ranges_of_rank = c->rows_of_rank, .whole = c->whole_out_features, .tp = c->tp};
      out[c->weight.impl()] = s;
      if (c->bias.defined()) out[c->bias.impl()] = s;
    } else if (auto* r = dynamic_cast<const RowParallelLinear*>(m.get())) {
      out[r->weight.impl()] = {.dim = 1,
                               .ranges_of_rank = even_ranges(r->in_features, r->tp->size()),
                               .whole = r->whole_in_features,
                               .tp = r->tp};
    } else if (auto* e = dynamic_cast<const VocabParallelEmbedding*>(m.get())) {
      out[e->weight.impl()] = {.dim = 0,
                               .ranges_of_rank = even_ranges(e->num_embeddings, e->tp->size()),
                               .whole = e->whole_rows,
                               .tp = e->tp};
    }
  }
  return out;
}

Tensor gather_share(const Tensor& local, const TensorShare& s) {
  autograd::NoGradGuard no_grad;
  Tensor mine = dim_first(local.detach(), s.dim);  // (n, ...)
  Shape gathered_shape = mine.shape();
  gathered_shape[0] *= s.tp->size();
  Tensor gathered = empty(gathered_shape, {.dtype = mine.dtype(), .device = mine.device()});
  s.tp->all_gather(gathered, mine)->wait();  // rank after rank
  Shape whole_shape = mine.shape();
  whole_shape[0] = s.whole;
  Tensor whole = empty(whole_shape, {.dtype = mine.dtype(), .device = mine.device()});
  const int64_t n = mine.size(0);
  for (size_t r = 0; r < s.ranges_of_rank.size(); ++r) {
    int64_t at = int64_t(r) * n;  // rank r's rows in the gathered tensor, in its ranges' order
    for (const RowRange& range : s.ranges_of_rank[r]) {
      slice(whole, 0, range.start, range.start + range.count)
          .copy_(slice(gathered, 0, at, at + range.count));
      at += range.count;
    }
  }
  return s.dim == 0 ? whole : contiguous(transpose(whole, 0, 1));
}

Tensor cut_share(const Tensor& whole, const TensorShare& s) {
  autograd::NoGradGuard no_grad;
  LOOM_CHECK(whole.dim() > s.dim && whole.size(s.dim) == s.whole,
             "tensor parallel: a whole tensor of ", s.whole, " along dim ", s.dim,
             " was expected, got ", describe(whole));
  Tensor rows = dim_first(whole, s.dim);
  std::vector<Tensor> parts;
  for (const RowRange& range : s.ranges_of_rank[size_t(s.tp->rank())])
    parts.push_back(slice(rows, 0, range.start, range.start + range.count));
  Tensor mine = contiguous(cat(parts, 0));
  return s.dim == 0 ? mine : contiguous(transpose(mine, 0, 1));
}

nn::StateDict share_of_state_dict(nn::Module& model, const nn::StateDict& whole) {
  const auto shares = tensor_shares(model);
  std::unordered_map<std::string, const TensorShare*> by_name;
  for (const auto& [name, p] : model.named_parameters())
    if (auto it = shares.find(p.impl()); it != shares.end()) by_name[name] = &it->second;
  nn::StateDict out;
  for (const auto& [name, t] : whole) {
    auto it = by_name.find(name);
    out.emplace_back(name, it == by_name.end() ? t : cut_share(t, *it->second));
  }
  return out;
}

namespace {

// The share of the parameter an optimizer entry "state.<i>.<buffer>" belongs to (null for other
// entries and whole parameters).
const TensorShare* share_of_entry(
    const std::string& key, const optim::Optimizer& opt,
    const std::unordered_map<const TensorImpl*, TensorShare>& shares) {
  if (key.rfind("state.", 0) != 0) return nullptr;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos || dot == 6) return nullptr;
  for (size_t c = 6; c < dot; ++c)
    if (key[c] < '0' || key[c] > '9') return nullptr;  // not a parameter's entry
  const size_t i = std::stoul(key.substr(6, dot - 6));
  if (i >= opt.all_params().size()) return nullptr;
  auto it = shares.find(opt.all_params()[i].impl());
  return it == shares.end() ? nullptr : &it->second;
}

}  // namespace

nn::StateDict whole_optimizer_state(nn::Module& model, const optim::Optimizer& opt,
                                    nn::StateDict sd) {
  const auto shares = tensor_shares(model);
  for (auto& [key, t] : sd)
    if (const TensorShare* s = share_of_entry(key, opt, shares); s && t.dim() > s->dim)
      t = gather_share(t, *s);
  return sd;
}

nn::StateDict share_of_optimizer_state(nn::Module& model, const optim::Optimizer& opt,
                                       const nn::StateDict& whole) {
  const auto shares = tensor_shares(model);
  nn::StateDict out;
  for (const auto& [key, t] : whole) {
    const TensorShare* s = share_of_entry(key, opt, shares);
    out.emplace_back(key, s && t.dim() > s->dim ? cut_share(t, *s) : t);
  }
  return out;
}

}  // namespace loom::distributed
