// The vocabulary split over tensor-parallel ranks (distributed/tensor_parallel/vocab_parallel.h,
// Note [Vocabulary parallel]): the embedding's lookup of this rank's rows, the plan that swaps a
// model's embedding and head, and the cross-entropy from this rank's columns of the logits.
#include "distributed/tensor_parallel/vocab_parallel.h"

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "distributed/tensor_parallel/tp_linear.h"
#include "distributed/tensor_parallel/tp_regions.h"
#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::distributed {

namespace {

Tensor my_rows(const nn::Embedding& whole, const std::shared_ptr<ProcessGroup>& tp) {
  LOOM_CHECK(tp != nullptr, "VocabParallelEmbedding: the tensor-parallel group is null");
  const RowRange r = even_share(whole.num_embeddings, tp->size(), tp->rank(), "vocabulary rows");
  autograd::NoGradGuard no_grad;
  return contiguous(slice(whole.weight, 0, r.start, r.start + r.count)).detach().clone();
}

// x summed over the group in place (a contiguous copy), for the loss's statistics.
Tensor reduced(const Tensor& x, ProcessGroup& tp, ReduceOp op) {
  Tensor out = contiguous(x).clone();
  tp.all_reduce(out, op)->wait();
  return out;
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& whole,
                                               std::shared_ptr<ProcessGroup> group)
    : nn::Embedding("VocabParallelEmbedding", my_rows(whole, group)),
      start(group->rank() * (whole.num_embeddings / group->size())),
      whole_rows(whole.num_embeddings),
      tp(std::move(group)) {}

// ids (B, T) -> the rows this rank holds, zeros for the others, summed over the ranks.
Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  Tensor local = ids - double(start);
  Tensor mine = ge(local, zeros_like(local)).to(DType::I64) *
                lt(local, double(num_embeddings)).to(DType::I64);  // 1 where the row is here
  Tensor rows = embedding(weight, local * mine);  // ids elsewhere look up row 0, then are zeroed
  Tensor kept = rows * unsqueeze(mine.to(weight.dtype()), -1);
  return reduce_from_tensor_parallel(kept, *tp);
}

Tensor gather_whole_weight(const VocabParallelEmbedding& e) {
  autograd::NoGradGuard no_grad;
  Tensor out = empty({e.whole_rows, e.embedding_dim},
                     {.dtype = e.weight.dtype(), .device = e.weight.device()});
  e.tp->all_gather(out, contiguous(e.weight))->wait();  // rank-major: the rows in order
  return out;
}

VocabShard parallelize_vocabulary(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp) {
  LOOM_CHECK(tp != nullptr, "parallelize_vocabulary: the tensor-parallel group is null");
  nn::Linear* head = nullptr;
  std::shared_ptr<VocabParallelEmbedding> emb;
  bool tied = true;
  if (auto* g = dynamic_cast<nn::GPT*>(&model)) {
    emb = std::make_shared<VocabParallelEmbedding>(*g->wte, tp);
    g->replace_child("wte", emb), g->wte = emb, head = g->lm_head.get();
  } else if (auto* l = dynamic_cast<nn::Llama*>(&model)) {
    emb = std::make_shared<VocabParallelEmbedding>(*l->embed_tokens, tp);
    l->replace_child("embed_tokens", emb), l->embed_tokens = emb, head = l->lm_head.get();
    tied = l->config.tie_embeddings;
    if (!tied) {  // the head's rows of this rank, as a column-parallel Linear (gathered whole)
      const int64_t V = l->lm_head->out_features;
      std::vector<std::vector<RowRange>> rows;
      for (int r = 0; r < tp->size(); ++r)
        rows.push_back({even_share(V, tp->size(), r, "vocabulary rows")});
      auto split = std::make_shared<ColumnParallelLinear>(*l->lm_head, rows, tp);
      l->replace_child("lm_head", split), l->lm_head = split, head = split.get();
    }
  } else {
    LOOM_FAIL("parallelize_vocabulary: splits GPT and Llama models, not ", model.type_name());
  }
  if (tied) head->weight = emb->weight;  // the shard is the head's too (Note [Tied embedding])
  return {emb->start, emb->num_embeddings, head->weight};
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t start,
                                    ProcessGroup& tp) {
  const int64_t Vr = logits.size(-1);
  Tensor z = reshape(logits, {-1, Vr});  // (N, V_r)
  Tensor t = reshape(targets, {-1, 1});  // (N, 1)
  Tensor softmax_r, onehot, weight;      // what the backward needs
  Tensor loss;
  {
    autograd::NoGradGuard no_grad;
    Tensor m = reduced(std::get<0>(max(z, 1, true)), tp, ReduceOp::Max);  // (N, 1)
    Tensor e = exp(z - m);
    Tensor s = reduced(sum(e, {1}, true), tp, ReduceOp::Sum);  // (N, 1)
    Tensor cols =
        arange(double(start), double(start + Vr), 1.0, {.dtype = DType::I64, .device = z.device()});
    onehot = to(eq(t, cols), z.dtype());                                     // (N, V_r)
    Tensor picked = reduced(sum(z * onehot, {1}, true), tp, ReduceOp::Sum);  // the target's logit
    Tensor valid = to(gt(t, -1.0), z.dtype());                               // (N, 1)
    const double count = std::max(sum(valid).item(), 1.0);
    softmax_r = e / s, weight = valid / count;
    loss = sum((log(s) + m - picked) * weight);
  }
  if (!autograd::any_requires_grad({logits})) return loss;
  const Shape shape = logits.shape();
  return record("vocab_parallel_cross_entropy", loss, {logits},
                [softmax_r, onehot, weight, shape](const Tensor& g) -> Grads {
                  return {reshape((softmax_r - onehot) * weight * g, shape)};
                });
}

Tensor vocab_parallel_loss(const Tensor& hidden, const VocabShard& shard, const Tensor& targets,
                           ProcessGroup& tp) {
  Tensor logits = linear(copy_to_tensor_parallel(hidden, tp), shard.head_weight, Tensor());
  return vocab_parallel_cross_entropy(logits, targets, shard.start, tp);
}

}  // namespace loom::distributed
