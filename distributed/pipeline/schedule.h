// Pipeline schedules: one training step's forward and backward of a rank's PipelineStages over
// its pipeline group, the batch cut into micro-batches whose activations go forward and whose
// gradients come back with the group's send and recv: GPipe (every forward, then every backward),
// 1F1B (one forward, one backward in the steady state: at most S micro-batches in flight on the
// first stage instead of M) and interleaved 1F1B (V chunks per rank, Note [Interleaved 1F1B] in
// distributed/pipeline/interleaved_schedule.h); evaluation's forward-only pass over the stages;
// the clip over the whole model. Leaves out: zero-bubble schedules, overlapping the training
// step's sends with compute.
#pragma once

#include <optional>
#include <vector>

#include "core/dtype.h"
#include "distributed/pipeline/interleaved_schedule.h"
#include "distributed/pipeline/pipeline_stage.h"
#include "distributed/process_group/process_group.h"
#include "nn/amp/grad_scaler.h"

namespace loom::distributed {

struct PipelineOptions {
  int micro_batches = 1;  // M: the batch's rows split evenly (an error when M does not divide them)
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  // Mixed precision: each stage's forward (and the last stage's loss) runs under this autocast
  // dtype (bf16); the backwards run with autocast off, as the engine's always do. The activations
  // and their gradients travel between stages in the head weight's dtype (the float32 master's).
  std::optional<DType> autocast{};
  // fp16: the last stage scales each micro-batch's loss by the scaler's scale before its backward,
  // so every stage's gradients arrive scaled (the gradients sent between stages too); each stage's
  // scaler gets its state on the stage's device, for its own unscale_ (Note [Loss scaling over a
  // pipeline]). Null or disabled: no scaling.
  amp::GradScaler* scaler = nullptr;
  // The group the gradients travel back on, the same members as pp (null: pp itself). NCCL needs
  // one of its own for M > 1 (Note [Two groups for a pipeline's messages]).
  ProcessGroup* gradients = nullptr;
};

// Note [Two groups for a pipeline's messages]
// NCCL runs a group's sends and receives in call order on the group's one stream, and a send (of
// more than NCCL's buffers hold) completes only together with its peer's receive. 1F1B's steady
// state crosses them: stage 0 sends micro-batch 1's activations, then receives micro-batch 0's
// gradient; stage 1 sends that gradient before it receives micro-batch 1's activations. On one
// stream each send waits for a receive queued behind the other's send: a deadlock for every
// M >= 2 (GPipe, all forwards before any backward, never crosses them). Gloo waits for sends and
// receives on threads of their own and never blocks so. With the gradients on a second group of the
// same members (DeviceMesh::another_group), each stream carries one direction in one order on both
// of its ends (activations in micro-batch order forward, gradients in micro-batch order back), and
// no cycle is left: tests/distributed/pipeline/test_schedule_nccl_order.cpp builds the graph of
// streams, ready events and matched sends for 1F1B and GPipe over many (S, M) and finds 1F1B's
// cycle with one group and none with two. Interleaved 1F1B still has cycles with two (its chunks'
// messages wrap round the ranks), so it stays refused on NCCL (Note [Interleaved 1F1B]).
// Megatron-LM avoids the same deadlock by posting each step's send and receive as one NCCL group.

// Note [Loss scaling over a pipeline]
// Under --amp fp16 every rank has a GradScaler with the same options and state. Only the last
// stage computes a loss, so only its scaler's scale() runs; the scale reaches the other stages
// inside the gradients they receive. Each stage's unscale_ divides its own gradients by its own
// copy of the scale (equal on every rank: the same start, the same updates) and its inf/NaN flag is
// summed over the stages (and tp, and ZeRO's dp) by the optimizer's sum_over_shards, so every rank
// skips or takes the same step and moves its scale the same way.

// Note [Pipeline schedules]
// With S stages and M micro-batches, stage s runs micro-batch m's forward once it has received
// m's activations from s - 1, and its backward once it has received the gradient of its output
// from s + 1; the last stage starts each backward from its loss / M, so the gradients are those of
// the whole batch's mean loss. GPipe runs all M forwards, then all M backwards; 1F1B runs
// S - s - 1 forwards to fill the pipe, then alternates one forward and one backward, then drains.
// Both compute the same gradients (summed in another order); 1F1B keeps at most S - s micro-
// batches' activations instead of M. Either way each stage idles for (S - 1) / (M + S - 1) of the
// step when stages take equal time: the bubble (pipeline_bubble). Sends are asynchronous and
// waited for at the end; receives block. Each rank runs its list of actions (pipeline_actions);
// with V chunks per rank (the interleaved schedule) the model has S V chunks, chunk c on rank
// c mod S, and what goes between stages goes between chunks c and c + 1. Message tags are
// 2 (c M + m) for micro-batch m's activations into chunk c and 2 (c M + m) + 1 for the gradient
// of chunk c's output: one per (chunk, micro-batch, direction). After the backwards, a tied head's
// two gradients are summed (Note [Pipeline stages]): the first chunk's rank and the last's.

// One step's forward and backward on this stage: x (B, T) ids (the first stage reads them) and y
// (B, T) targets (the last reads them); every stage passes at least one of them (a middle stage
// takes the shapes from it) and the same micro-batch count. `pp`'s rank must be the stage's index.
// The parameters' .grad hold the step's gradients afterwards (added to whatever they held). Returns
// the batch's mean loss on every stage (the last broadcasts it), 0-d.
Tensor pipeline_forward_backward(PipelineStage& stage, const Tensor& x, const Tensor& y,
                                 ProcessGroup& pp, const PipelineOptions& options);
// The same over this rank's V chunks (rank_chunks: chunk v is the model's v S + rank of S V);
// V >= 2 takes the interleaved schedule, V = 1 GPipe or 1F1B.
Tensor pipeline_forward_backward(const std::vector<PipelineStage*>& chunks, const Tensor& x,
                                 const Tensor& y, ProcessGroup& pp, const PipelineOptions& options);

// Note [Forward-only pipeline]
// Evaluation runs the stages forward only, without autograd: each evaluation batch is a micro-batch
// flowing from stage to stage, the first stage embedding the ids, every stage but the last sending
// its output (b, T, C) on, the last computing the head's logits (b, T, V). A stage returns once the
// next stage has received its output, which that stage does when it is done with the batch before:
// stage s computes batch i while stage s + 1 computes batch i - 1, so the pipe fills and drains
// once per evaluation, not once per batch. Every stage passes the same batch x (the stages of one
// pipeline read the same windows: they are one data-parallel replica), for its shape. With V
// chunks per rank a batch goes round the ranks V times, each rank running its chunks in order
// (batch, chunk) as every other rank does, so the first blocked send or receive in that order
// always finds its partner there. The messages carry the tag kForwardTag, above the training
// step's (checked).
constexpr int kForwardTag = 1 << 20;

// One evaluation batch's forward on this stage: x (b, T) ids. Returns the logits (b, T, V) on the
// last stage, an undefined tensor on the others. `pp`'s rank must be the stage's index.
Tensor pipeline_forward(PipelineStage& stage, const Tensor& x, ProcessGroup& pp);
// The same over this rank's chunks (in order of their index).
Tensor pipeline_forward(const std::vector<PipelineStage*>& chunks, const Tensor& x,
                        ProcessGroup& pp);

// (S - 1) / (V M + S - 1): the fraction of a step each stage idles, in GPipe and 1F1B (V = 1) and
// in interleaved 1F1B with V chunks per rank (Note [Interleaved 1F1B]), the stages' forwards and
// backwards taking equal times.
double pipeline_bubble(int stages, int micro_batches, int virtual_stages = 1);

// clip_grad_norm_ over the whole model: each stage's squares summed over `pp` (the tied head
// counted once), every gradient of the stage scaled by min(1, max_norm / (total + 1e-6)). Returns
// the total. A collective over `pp`.
Tensor clip_grad_norm_pipeline_(const PipelineStage& stage, double max_norm, ProcessGroup& pp);
Tensor clip_grad_norm_pipeline_(const std::vector<PipelineStage*>& chunks, double max_norm,
                                ProcessGroup& pp);

}  // namespace loom::distributed
