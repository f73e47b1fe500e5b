// PipelineStage: one stage of a decoder-only language model (GPT-2, Llama) cut into pipeline
// stages: the first holds the embedding and the first blocks, the middle ones blocks, the last the
// last blocks, the final norm and the head with its loss. Leaves out: running the stages (the
// schedules of schedule.h) and cutting other models (an error names the model).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/transformer.h"

namespace loom::distributed {

// Note [Pipeline stages]
// A model of L blocks in S stages: stage s runs blocks [s L / S, (s + 1) L / S) (even cuts; S must
// not exceed L, and S must divide L: an error names both). Stage 0 first runs the embedding, stage
// S - 1 last runs the final norm and the head with the cross-entropy (linear_cross_entropy, the
// logits never whole). A tied head (GPT-2, small Llamas) uses the embedding's matrix on the first
// and on the last stage: each keeps its own gradient of it, and the schedule sums the two before
// the optimizer steps (Megatron's embedding group), so the copies stay equal. Every rank builds
// the whole model from the same seed and computes only with its stage's parameters; the others
// are never touched (parameters() lists the stage's, for the optimizer; held() every tensor the
// stage computes with, frozen ones too: what a pipeline rank keeps, Note [A pipeline rank holds its
// stage] in distributed/parallel/pipeline_model.h). Under the interleaved schedule a "stage" is
// one of the S V chunks (Note [Interleaved 1F1B] in distributed/pipeline/interleaved_schedule.h):
// the first chunk runs the embedding, the last the head, and a rank holds V of them.
// Under sequence parallel (the blocks a SequenceParallelStack, Note [Sequence parallel] in
// distributed/tensor_parallel/sequence_parallel.h) the first stage splits the sequence over tp
// after the embedding and the last gathers it before the final norm, as the stack's own forward
// does around all of its blocks; in between each tp rank sends only its own T / tp positions to
// its counterpart of the next stage (as Megatron does: the pp group joins ranks of one tp
// coordinate, so the positions stay with their rank), and after the backwards the schedule sums
// the stage's norms' partial gradients over tp (sync_sequence_parallel_grads).
class SequenceParallelStack;

class PipelineStage {
 public:
  // Stage `stage` of `stages` of `model` (a GPT or a Llama, plain or tensor-parallel).
  PipelineStage(nn::Module& model, int stage, int stages);

  bool is_first() const { return stage_ == 0; }
  bool is_last() const { return stage_ == stages_ - 1; }
  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int64_t first_block() const { return begin_; }
  int64_t end_block() const { return end_; }

  // The first stage: ids (b, T) int64 -> hidden (b, T, C); the others: hidden -> hidden. The last
  // stage's output has been through the final norm.
  Tensor forward(const Tensor& in);
  // The last stage: the mean cross-entropy of forward's output against targets (b, T) (-1
  // ignored), the head and the loss as one op.
  Tensor loss(const Tensor& hidden, const Tensor& targets);
  // The last stage: the head's logits (b, T, V) of forward's output (b, T, C), for evaluation.
  Tensor logits(const Tensor& hidden);

  // The parameters this stage computes with (the tied matrix on the first and the last stage).
  std::vector<Tensor> parameters() const;
  // Every parameter of the stage's modules, those that do not train (LoRA's base) too.
  std::vector<Tensor> held() const;
  // Whether the head is the embedding's matrix and the first and last stage differ (both hold it:
  // the schedule sums its two gradients over the stages, the middle ones adding zeros).
  bool ties_head() const { return tied_ && stages_ > 1; }
  // The head's (V, C) matrix (the embedding's when tied); on every stage, for its shape.
  const Tensor& head_weight() const { return head_weight_; }
  // The blocks' width C: what flows between stages is (b, T, C) in the head's dtype, on its
  // device.
  int64_t hidden_size() const;

  bool sequence_parallel() const { return sp_ != nullptr; }
  // The positions of the (b, ., C) activation that crosses a stage boundary on this rank for a
  // sequence of T: T, or T / tp under sequence parallel.
  int64_t boundary_length(int64_t T) const;
  // Sums the partial gradients of the stage's sequence-parallel parameters (its blocks' norms and
  // row-parallel biases) over tp; nothing without sequence parallel. A collective over tp.
  void sync_sequence_parallel_grads();

 private:
  std::vector<Tensor> listed(bool trainable_only) const;

  int stage_, stages_;
  int64_t begin_ = 0, end_ = 0;
  std::function<Tensor(const Tensor&)> embed_;  // ids -> hidden
  nn::TransformerStack* blocks_ = nullptr;
  nn::Module* final_norm_ = nullptr;
  nn::Module* embedding_ = nullptr;  // the modules whose parameters the first stage lists
  nn::Module* head_ = nullptr;       // the head's Linear: (b, T, C) -> (b, T, V)
  Tensor head_weight_;               // (V, C)
  bool tied_ = false;
  SequenceParallelStack* sp_ = nullptr;  // the blocks, when sequence parallel
  std::vector<Tensor> sp_params_;        // the stage's share of sequence_parallel_parameters
};

// The chunks rank `rank` of `stages` computes with when the model is cut into stages V chunks
// (Note [Interleaved 1F1B] in distributed/pipeline/interleaved_schedule.h): chunks rank,
// rank + stages, ..., rank + (V - 1) stages, each a PipelineStage of stages V; with V = 1 the
// rank's one stage. An error names --pp and --pp-virtual-stages when stages V does not divide
// the blocks.
std::vector<std::unique_ptr<PipelineStage>> rank_chunks(nn::Module& model, int rank, int stages,
                                                        int virtual_stages);

}  // namespace loom::distributed
