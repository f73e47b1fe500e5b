// Interleaved 1F1B (Note [Interleaved 1F1B] in distributed/pipeline/interleaved_schedule.h): each
// rank's order of actions against the Note's hand-worked table (S = 2, V = 2, M = 4), the simulated
// timeline of every rank's order finishing (no deadlock) with the bubble (S - 1) / (V M + S - 1)
// for many (S, V, M), a wrong order caught by the simulation, the refusals; then real Gloo
// processes (pp_tool.cpp): GPT and Llama with V chunks per rank train as one float64 process does
// (1e-7), alone and composed with data and tensor (and sequence) parallel, and a cut that does not
// divide the blocks is refused naming --pp and --pp-virtual-stages.
#include <gtest/gtest.h>

#include "../spawn.h"
#include "distributed/pipeline/interleaved_schedule.h"
#include "distributed/pipeline/schedule.h"

namespace {

using loom::distributed::pipeline_actions;
using loom::distributed::PipelineAction;
using loom::distributed::PipelineSchedule;
using loom::distributed::simulate_pipeline;

// "F0.0 F0.1 ...": the actions in the Note's notation, chunks in the model's numbering.
std::string written(const std::vector<PipelineAction>& order, int S, int rank) {
  std::string out;
  for (const PipelineAction& a : order)
    out += (out.empty() ? "" : " ") + std::string(a.forward ? "F" : "B") +
           std::to_string(a.chunk * S + rank) + "." + std::to_string(a.micro_batch);
  return out;
}

std::vector<std::vector<PipelineAction>> orders(PipelineSchedule s, int S, int V, int M) {
  std::vector<std::vector<PipelineAction>> out;
  for (int r = 0; r < S; ++r) out.push_back(pipeline_actions(s, S, V, M, r));
  return out;
}

// The Note's table, row by row. Seen failing: the backward's chunk not reversed (V - 1 - v), rank
// 0's order "... F0.2 B0.0 ..." and the simulation "rank 0 waits forever at action 5 (backward of
// micro-batch 0 through chunk 0)".
TEST(InterleavedSchedule, EachRanksOrderIsTheHandWorkedTable) {
  const auto o = orders(PipelineSchedule::Interleaved, 2, 2, 4);
  EXPECT_EQ(written(o[0], 2, 0),
            "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3");
  EXPECT_EQ(written(o[1], 2, 1),
            "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3");
  const auto tl = simulate_pipeline(o, 2, 4);
  EXPECT_EQ(tl.deadlock, "");
  EXPECT_EQ(tl.length, 18);
  EXPECT_EQ(tl.start[0], (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 16, 17}));
  EXPECT_EQ(tl.start[1], (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
}

// Every rank's order finishes against the others' for each (S, V, M), its step (2 M V actions per
// rank, one unit each) idling exactly the bubble pipeline_bubble gives; the plain schedules too.
// Seen failing: the warmup without its 2 (S - r - 1) forwards still finishes but idles 0.43 of the
// step at S = 2, V = 2, M = 4 (the formula: 0.11); the micro-batches of a group taken in reverse
// in the backward, "rank 0 waits forever at action 5 (backward of micro-batch 1 through chunk
// 2)".
TEST(InterleavedSchedule, EveryOrderFinishesWithTheBubbleOfTheFormula) {
  for (int S : {2, 3, 4, 8})
    for (int V : {1, 2, 3, 4})
      for (int groups : {1, 2, 3}) {
        const int M = S * groups;
        const auto s = V == 1 ? PipelineSchedule::OneFOneB : PipelineSchedule::Interleaved;
        const auto tl = simulate_pipeline(orders(s, S, V, M), V, M);
        ASSERT_EQ(tl.deadlock, "") << "S " << S << " V " << V << " M " << M;
        const double bubble = 1.0 - double(2 * M * V) / double(tl.length);
        EXPECT_NEAR(bubble, loom::distributed::pipeline_bubble(S, M, V), 1e-12)
            << "S " << S << " V " << V << " M " << M;
      }
  for (int M : {1, 3, 5}) {  // GPipe and 1F1B take any M
    for (auto s : {PipelineSchedule::GPipe, PipelineSchedule::OneFOneB})
      EXPECT_EQ(simulate_pipeline(orders(s, 4, 1, M), 1, M).deadlock, "") << M;
  }
  EXPECT_DOUBLE_EQ(loom::distributed::pipeline_bubble(2, 4, 2), 1.0 / 9.0);
  EXPECT_DOUBLE_EQ(loom::distributed::pipeline_bubble(2, 4), 1.0 / 5.0);
}

// The simulation catches an order that would hang: each rank running each micro-batch's forward
// and backward through its first chunk before its second chunk's (rank 0's B0.0 waits for B1.0,
// rank 1's B1.0 for B2.0, which rank 0 runs only after B0.0).
TEST(InterleavedSchedule, TheSimulationNamesTheRankAnOrderLeavesWaiting) {
  std::vector<std::vector<PipelineAction>> o(2);
  for (int r = 0; r < 2; ++r)
    for (int v = 0; v < 2; ++v)
      for (int m = 0; m < 2; ++m)
        o[size_t(r)].push_back({true, v, m}), o[size_t(r)].push_back({false, v, m});
  const auto tl = simulate_pipeline(o, 2, 2);
  EXPECT_EQ(tl.deadlock,
            "rank 0 waits forever at action 1 (backward of micro-batch 0 through chunk 0)");
}

std::string error_of(PipelineSchedule s, int S, int V, int M) {
  try {
    (void)pipeline_actions(s, S, V, M, 0);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(InterleavedSchedule, BadCombinationsAreRefusedNamingTheFlags) {
  EXPECT_NE(error_of(PipelineSchedule::Interleaved, 2, 2, 3)
                .find("3 micro-batches (--grad-accum 3) are not a multiple of --pp 2"),
            std::string::npos);
  EXPECT_NE(error_of(PipelineSchedule::Interleaved, 2, 1, 4)
                .find("takes 2 or more virtual stages per rank (--pp-virtual-stages), got 1"),
            std::string::npos);
  EXPECT_NE(error_of(PipelineSchedule::OneFOneB, 2, 2, 4)
                .find("2 virtual stages per rank (--pp-virtual-stages) need --pp-schedule "
                      "interleaved"),
            std::string::npos);
}

loom::test::WorkerRun run_pp(const std::vector<std::string>& args, int n) {
  return loom::test::run_gloo_workers(LOOM_PP_TOOL, args, n);
}

using loom::test::expect_all_exit;

#ifdef LOOM_WITH_GLOO
// S = 2, V = 2: chunks [0, 1) and [2, 3) on rank 0, [1, 2) and [3, 4) on rank 1; GPT's tied head
// on rank 0's first chunk and rank 1's last. Seen failing: the tied gradients not summed, weight
// diff 0.11 (and 0.099 at S = 4, V = 2 below); the schedule's peers at rank c / V instead of
// c mod S, "send: destination 0 is not another rank of this group (rank 0 of 2)".
TEST(InterleavedPipelineGloo, GptTwoRanksTwoChunksEachWithATiedHeadAndClipping) {
  expect_all_exit(
      run_pp({"train", "gpt", "8", "schedule=interleaved", "virtual=2", "micro=4", "clip=0.5"}, 2),
      0);
}

TEST(InterleavedPipelineGloo, LlamaTwoRanksThreeChunksEach) {
  expect_all_exit(
      run_pp({"train", "llama", "6", "schedule=interleaved", "virtual=3", "layers=6", "micro=2"},
             2),
      0);
}

TEST(InterleavedPipelineGloo, GptFourRanksTwoChunksEach) {
  expect_all_exit(run_pp({"train", "gpt", "6", "schedule=interleaved", "virtual=2", "layers=8",
                          "micro=8", "clip=1.0"},
                         4),
                  0);
}

// Sequence parallel between chunks: each tp rank's T / tp positions cross every chunk boundary.
TEST(InterleavedPipelineGloo, TimesTensorAndSequenceParallelAndDataParallelOnFourRanks) {
  expect_all_exit(run_pp({"train", "llama", "6", "schedule=interleaved", "virtual=2", "tp=2",
                          "pp=2", "sp=1", "micro=2"},
                         4),
                  0);
  expect_all_exit(run_pp({"train", "gpt", "6", "schedule=interleaved", "virtual=2", "dp=2", "pp=2",
                          "micro=2", "clip=1.0"},
                         4),
                  0);
}

TEST(InterleavedPipelineGloo, ACutThatDoesNotDivideTheBlocksIsRefusedNamingTheFlags) {
  auto run = run_pp({"train", "gpt", "1", "schedule=interleaved", "virtual=3"}, 2);
  expect_all_exit(run, 3);
  EXPECT_NE(run.output[0].find("pipeline parallel: --pp 2 x --pp-virtual-stages 3 = 6 chunks do "
                               "not divide the 4 blocks of GPT"),
            std::string::npos)
      << run.summary();
}
#endif

}  // namespace
