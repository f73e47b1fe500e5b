// The order of one rank's forward and backward actions in a pipeline step, for the three
// schedules (GPipe, 1F1B, interleaved 1F1B over virtual stages), and a simulated global timeline
// that runs every rank's order against the others' to show it cannot deadlock and to measure its
// bubble. Leaves out: running the actions (schedule.cpp does, with the sends and receives) and
// zero-bubble schedules (a backward split into its input and weight halves).
#pragma once

#include <string>
#include <vector>

namespace loom::distributed {

// GPipe: every forward, then every backward; 1F1B: one forward, one backward in the steady state;
// Interleaved: 1F1B over V chunks per rank (Note [Interleaved 1F1B]).
enum class PipelineSchedule { GPipe, OneFOneB, Interleaved };

// One action of a rank: the forward or the backward of micro-batch m through the rank's local
// chunk v (the model's chunk v S + rank of S V; with one chunk per rank, v is 0).
struct PipelineAction {
  bool forward = true;
  int chunk = 0;  // v, the rank's own numbering (0 .. V - 1)
  int micro_batch = 0;
  bool operator==(const PipelineAction& o) const {
    return forward == o.forward && chunk == o.chunk && micro_batch == o.micro_batch;
  }
};

// Note [Interleaved 1F1B]
// With S ranks and V chunks each, the model's L blocks are cut into S V chunks of L / (S V); chunk
// c lives on rank c mod S, so a micro-batch goes round the ranks V times forward and V times back
// (Megatron-LM's virtual pipeline stages). A rank's actions run the micro-batches in groups of S
// (M must be a multiple of S): forward k (k = 0 .. M V - 1) is local chunk (k mod S V) / S of
// micro-batch S (k / S V) + k mod S; backward k the same with the chunk reversed (V - 1 - v), so
// both sweep S micro-batches through one chunk, then the next. Rank r first runs
//   warmup = min(M V, 2 (S - r - 1) + (V - 1) S)
// forwards, then alternates forward warmup + i and backward i, then drains the backwards
// (Megatron's forward_backward_pipelining_with_interleaving). Sends are asynchronous and
// receives block, so a rank waits only for what it receives: simulate_pipeline runs every rank's
// order against the others', which the tests do for many (S, V, M), in
// tests/distributed/pipeline/test_interleaved_schedule.cpp. S = 2, V = 2, M = 4 (chunks c0, c2 on
// rank 0 and c1, c3 on rank 1; warmup 4 on rank 0, 2 on rank 1), every action one time unit,
// Fc.m / Bc.m the forward / backward of micro-batch m through chunk c (the model's numbering), "."
// idle:
// t   0    1    2    3    4    5    6    7    8    9    10   11   12   13   14   15   16   17
// r0 F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1  .   B2.2  .   B2.3 B0.2 B0.3
// r1  .   F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3  .
// (rank 0 idles at t = 12 and 14 waiting for rank 1's B3.2 and B3.3, rank 1 at t = 0 and 17).
// 16 busy units of 18 on each rank: the bubble is 2 / 18 = (S - 1) / (V M + S - 1) in units of a
// chunk (1 / V of a plain stage), against (S - 1) / (M + S - 1) = 1 / 5 of plain 1F1B. The price:
// V times the messages, and rank 0 keeps up to (V - 1) S + 2 (S - 1) + 1 micro-batch chunks'
// activations (each 1 / V of a stage's) instead of S. Tags are unique per (chunk, micro-batch,
// direction): 2 (c M + m) for the activations into chunk c, 2 (c M + m) + 1 for the gradient
// of chunk c's output (Note [Pipeline schedules] in distributed/pipeline/schedule.h).
// What "asynchronous" needs of the process group: Gloo posts a send at once and waits for sends
// and receives on two threads, so a receive completes as soon as its data is there (with one queue
// for both, the first try hung: rank 0's receive of B2.0's gradient waited behind its send of
// F0.2, which rank 1 receives only after it has sent that gradient). NCCL runs a rank's sends and
// receives in call order on one stream and matches them by order per peer, which V chunks'
// messages do not keep, so the schedule refuses NCCL; Megatron posts each step's sends and
// receives as one batch (batch_isend_irecv), which loom's process groups do not have yet.

// Rank `rank`'s actions, in order, for S ranks, V chunks each and M micro-batches. GPipe and 1F1B
// take V = 1; interleaved takes V >= 2 and an M that is a multiple of S (errors name the values).
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages,
                                             int virtual_stages, int micro_batches, int rank);

// A simulated step of every rank's actions (`orders[r]` rank r's), each one time unit, an action
// starting once its rank is free and what it receives has been computed (a forward of chunk c > 0
// waits for chunk c - 1's forward of the same micro-batch, a backward of chunk c < S V - 1 for
// chunk c + 1's backward; a backward for its own forward). `deadlock` names the first stuck rank
// and action, empty when every rank finishes; `start[r][i]` is action i's time on rank r, `length`
// the step's.
struct PipelineTimeline {
  std::vector<std::vector<int>> start;
  int length = 0;
  std::string deadlock{};
};
PipelineTimeline simulate_pipeline(const std::vector<std::vector<PipelineAction>>& orders,
                                   int virtual_stages, int micro_batches);

}  // namespace loom::distributed
