// The vocabulary split over the tensor-parallel ranks, as Megatron-LM splits it: each rank holds
// V / tp rows of the token embedding (and of the head), looks up only the ids in its rows, and
// computes the cross-entropy from its columns of the logits without ever gathering the whole
// (B, T, V) logits. Leaves out: a reduce-scatter straight from the lookup under sequence parallel
// (the lookup is summed whole, then split_sequence takes the rank's positions), label smoothing,
// vocabularies tp does not divide (pad the vocabulary, as llm.c pads GPT-2's to 50304).
#pragma once

#include <memory>

#include "distributed/process_group/process_group.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace loom::distributed {

// Note [Vocabulary parallel]
// Rank r holds vocabulary rows [r V/tp, (r+1) V/tp).
// - The embedding: each rank looks up the ids in its rows (zeros for the others) and the ranks'
//   results are summed (g, Note [f and g] in tp_regions.h): every rank gets every token's row.
// - The loss: the head's logits for rank r's rows are x W_r^T (x after f, so x's gradient is
//   summed over the ranks). Per token, the largest logit (an all-reduce of the ranks' maxima),
//   the sum of exp(logit - max) (an all-reduce sum) and the target's logit (held by one rank;
//   an all-reduce sum of it and zeros) give log(sum exp) + max - target, as cross_entropy does.
//   The backward on each rank is softmax - one_hot over its own columns, from what the forward
//   kept: three all-reduces of (B T) numbers forward, none backward beyond f's.
// A tied head (GPT-2) stays tied: the embedding's shard is the head's.

// An Embedding holding rows [start, start + rows) of the whole table; forward(ids) looks up every
// id of the whole vocabulary: (B, T) -> (B, T, C), the same on every rank.
class VocabParallelEmbedding : public nn::Embedding {
 public:
  VocabParallelEmbedding(const nn::Embedding& whole, std::shared_ptr<ProcessGroup> tp);
  Tensor forward(const Tensor& ids) override;

  int64_t start, whole_rows;
  std::shared_ptr<ProcessGroup> tp;
};

// The whole (V, C) table, gathered from every rank of the group (a collective).
Tensor gather_whole_weight(const VocabParallelEmbedding& e);

// What parallelize_vocabulary made: this rank's rows of the vocabulary and the head's matrix for
// them (the embedding's when tied).
struct VocabShard {
  int64_t start = 0, rows = 0;
  Tensor head_weight;  // (rows, C)
};

// Splits a GPT's or a Llama's token embedding and head over `tp` (after parallelize_tensor, before
// the optimizer is made). An error names the vocabulary and tp when tp does not divide it.
VocabShard parallelize_vocabulary(nn::Module& model, const std::shared_ptr<ProcessGroup>& tp);

// The mean cross-entropy over targets (any shape; -1 entries ignored) of logits whose columns
// [start, start + V_r) this rank holds: logits (..., V_r). A collective over `tp`.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, int64_t start,
                                    ProcessGroup& tp);

// The language-model loss from the last hidden state: hidden (B, T, C) -> f -> logits of this
// rank's rows (B, T, V_r) -> vocab_parallel_cross_entropy against targets (B, T).
Tensor vocab_parallel_loss(const Tensor& hidden, const VocabShard& shard, const Tensor& targets,
                           ProcessGroup& tp);

}  // namespace loom::distributed
