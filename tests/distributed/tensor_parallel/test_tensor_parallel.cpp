// Tensor parallelism in real processes over Gloo (tp_tool.cpp): GPT-2 and Llama split over tp 2
// (also with the vocabulary split), and dp 2 x tp 2, train 20 AdamW steps exactly as one process
// on the whole batch (float64,
// 1e-10: losses, the clip's total norm, every weight gathered whole); a tp that does not divide
// the key/value heads and a mesh that does not divide the world are refused by name.
#include <gtest/gtest.h>

#include "../spawn.h"

namespace {

loom::test::WorkerRun run_tp(const std::vector<std::string>& args, int n) {
  return loom::test::run_workers(LOOM_TP_TOOL, args, n, loom::test::free_port(),
                                 {{"LOOM_TEST_BACKEND", "gloo"}}, 240);
}

void expect_all_exit(const loom::test::WorkerRun& run, int code) {
  ASSERT_FALSE(run.timed_out) << run.summary();
  for (size_t r = 0; r < run.exit_codes.size(); ++r)
    EXPECT_EQ(run.exit_codes[r], code) << "rank " << r << "\n" << run.summary();
}

#ifdef LOOM_WITH_GLOO
TEST(TensorParallelGloo, GptOnTwoRanksTrainsAsOneProcessWithClipping) {
  expect_all_exit(run_tp({"train", "gpt", "20", "clip=0.5"}, 2), 0);
}

TEST(TensorParallelGloo, LlamaOnTwoRanksSplitsQueryAndKeyValueHeadsAndSwiglu) {
  expect_all_exit(run_tp({"train", "llama", "20", "clip=0.5"}, 2), 0);
}

TEST(TensorParallelGloo, DataTimesTensorParallelOnFourRanksTrainsAsOneProcess) {
  expect_all_exit(run_tp({"train", "gpt", "20", "dp=2", "tp=2", "clip=1.0"}, 4), 0);
}

// The vocabulary split too (Note [Vocabulary parallel]): the embedding's rows and the head's,
// the loss from each rank's columns of the logits. GPT's head stays tied to its embedding shard;
// Llama's untied head is gathered whole like the Linears. (A target logit not summed over the
// ranks: 0.099 in the losses; rows of other ranks not zeroed in the lookup: 0.059 in the weights.)
TEST(TensorParallelGloo, GptWithTheVocabularySplitTrainsAsOneProcess) {
  expect_all_exit(run_tp({"train", "gpt", "20", "clip=0.5", "vocab=1"}, 2), 0);
}

TEST(TensorParallelGloo, LlamaWithTheVocabularyAndUntiedHeadSplitTrainsAsOneProcess) {
  expect_all_exit(run_tp({"train", "llama", "20", "clip=0.5", "vocab=1"}, 2), 0);
}

TEST(TensorParallelGloo, ATpThatDoesNotDivideTheKeyValueHeadsIsRefusedByName) {
  auto run = run_tp({"train", "llama", "1", "tp=4"}, 4);
  expect_all_exit(run, 3);
  EXPECT_NE(run.output[0].find("tensor parallel: tp 4 does not divide the 2 key/value heads of "
                               "layers.0.attn"),
            std::string::npos)
      << run.summary();
}

TEST(TensorParallelGloo, AMeshThatDoesNotDivideTheWorldIsRefusedByName) {
  auto run = run_tp({"train", "gpt", "1", "dp=2", "tp=2"}, 3);
  expect_all_exit(run, 3);
  EXPECT_NE(run.output[0].find("DeviceMesh(dp 2 x tp 2): the sizes multiply to 4 ranks but the "
                               "world has 3"),
            std::string::npos)
      << run.summary();
}
#endif

}  // namespace
