// train_gpt (examples/train_gpt.cpp) with --pp 2 --pp-schedule interleaved --pp-virtual-stages 2
// on two Gloo processes under loomrun: a 4-block GPT cut into 4 chunks of one block (Note
// [Interleaved 1F1B] in distributed/pipeline/interleaved_schedule.h) ends at one process's
// weights and validation losses, its checkpoint (the whole layout) finishes as one process and as
// plain 1F1B, and one process's as interleaved; under --amp bf16 and fp16 too; bad combinations of
// the flags are refused naming them. Leaves out: the schedule's values in float64
// (tests/distributed/pipeline/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/examples/example_program.h"

namespace fs = std::filesystem;
using loom::testing_support::CommandRun;
using loom::testing_support::max_weight_difference;
using loom::testing_support::run_command;

namespace {

// About 30 KB of sentences from a small grammar (seeded).
std::string write_text(const fs::path& dir) {
  std::vector<std::string> who{"the cat", "a dog", "my friend", "the old man"};
  std::vector<std::string> did{"saw", "liked", "followed", "found"};
  std::vector<std::string> what{"the river", "a red ball", "the small house"};
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < 30000)
    s += who[rng() % who.size()] + " " + did[rng() % did.size()] + " " + what[rng() % what.size()] +
         ".\n";
  const std::string path = (dir / "text.txt").string();
  std::ofstream(path) << s;
  return path;
}

const std::string kGpt = " --n-embd 32 --n-head 2", kLlama = " --arch llama --model tiny";

// A GPT (or `model`) of `layers` blocks on 32-token windows, 8 per step, on the CPU; under loomrun
// for procs > 1.
std::string gpt(int procs, const std::string& text, const std::string& args, int layers = 4,
                const std::string& model = kGpt) {
  std::string prog = std::string(TRAIN_GPT_BIN) + " --device cpu --workers 0 --text " + text +
                     " --n-layer " + std::to_string(layers) + model +
                     " --seq-len 32 --batch-size 8 --lr 3e-3 --warmup 4 --eval-windows 16 "
                     "--seed 5 " +
                     args;
  if (procs == 1) return prog;
  return std::string(LOOMRUN_BIN) + " --standalone --nproc_per_node=" + std::to_string(procs) +
         " " + prog;
}

// The numbers after each "val loss " in the output, in order.
std::vector<double> val_losses(const std::string& out) {
  std::vector<double> v;
  std::regex re("val loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

const std::string kInterleaved = " --pp 2 --pp-schedule interleaved --pp-virtual-stages 2";

// `from`'s step-3 checkpoint resumed under `layout` on `procs` processes ends at `one`'s weights.
void expect_resumes(const fs::path& dir, const std::string& text, const std::string& common,
                    const fs::path& one, const fs::path& from, const std::string& name,
                    const std::string& layout, int procs) {
  const fs::path mid = "ckpt-00000003.safetensors", last = "ckpt-00000006.safetensors";
  const fs::path to = dir / name;
  fs::create_directories(to);
  fs::copy_file(from / mid, to / mid);
  CommandRun r = run_command(gpt(procs, text, common + to.string() + layout + " --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LE(max_weight_difference(one / last, to / last), 1e-5) << name;
}

// Seen failing: the tied embedding's two gradients not summed over the stages, weight diff 0.017
// from one process (one process's checkpoint resumed as interleaved: 0.0095).
TEST(TrainGptInterleaved, TwoProcessesTwoChunksEachEqualOneProcessAndResumeAcrossLayouts) {
#ifndef LOOM_WITH_GLOO
  GTEST_SKIP() << "built without Gloo (libgloo-dev): no CPU process group";
#endif
  const fs::path dir = loom::testing_support::fresh_temp_dir("gpt_interleaved");
  const fs::path one = dir / "one", il = dir / "il", plain = dir / "plain";
  const std::string text = write_text(dir);
  const std::string common = "--max-steps 6 --eval-every 3 --grad-accum 2 --checkpoint-dir ";
  CommandRun a = run_command(gpt(1, text, common + one.string()));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CommandRun b = run_command(gpt(2, text, common + il.string() + kInterleaved));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("pipeline parallel over 2 stages (interleaved 1F1B, 2 virtual stages "
                          "each)"),
            std::string::npos)
      << b.output;
  const fs::path last = "ckpt-00000006.safetensors";
  EXPECT_LE(max_weight_difference(one / last, il / last), 1e-5);
  const std::vector<double> va = val_losses(a.output), vb = val_losses(b.output);
  ASSERT_EQ(va.size(), 2u) << a.output;
  ASSERT_EQ(vb.size(), 2u) << b.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(vb[i], va[i], 1.5e-4) << b.output;
  // The whole layout both ways: interleaved -> one process and -> plain 1F1B; one -> interleaved.
  expect_resumes(dir, text, common, one, il, "il_to_one", "", 1);
  expect_resumes(dir, text, common, one, il, "il_to_1f1b", " --pp 2", 2);
  expect_resumes(dir, text, common, one, one, "one_to_il", kInterleaved, 2);
  fs::remove_all(dir);
}

// --amp bf16 and fp16 with 2 chunks per process: each chunk's forward under autocast, the
// residual stream (float32) sent between chunks, and under fp16 the last chunk's loss scaled and
// every rank's gradients unscaled by its own GradScaler (Note [Loss scaling over a pipeline] in
// distributed/pipeline/schedule.h). A tiny Llama of 4 blocks, as the plain pipeline's test of
// tests/examples/test_train_gpt.cpp uses (why, and the bounds: there). Seen failing: the GradScaler
// left out of the interleaved step (the loss unscaled), fp16 weight diff 8.7e-3; the chunks'
// forwards without autocast, 8.0e-4 (bf16) and 1.1e-4 (fp16).
TEST(TrainGptInterleaved, UnderBf16AndFp16AutocastEqualsOneProcess) {
#ifndef LOOM_WITH_GLOO
  GTEST_SKIP() << "built without Gloo (libgloo-dev): no CPU process group";
#endif
  const fs::path dir = loom::testing_support::fresh_temp_dir("gpt_interleaved_amp");
  const std::string text = write_text(dir);
  for (const std::string amp : {"bf16", "fp16"}) {
    const fs::path one = dir / (amp + "_one"), il = dir / (amp + "_il");
    const std::string common =
        "--max-steps 6 --eval-every 6 --grad-accum 2 --amp " + amp + " --checkpoint-dir ";
    CommandRun a = run_command(gpt(1, text, common + one.string(), 4, kLlama));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CommandRun b = run_command(gpt(2, text, common + il.string() + kInterleaved, 4, kLlama));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const fs::path last = "ckpt-00000006.safetensors";
    EXPECT_LE(max_weight_difference(one / last, il / last), amp == "fp16" ? 5e-5 : 1e-5) << amp;
  }
  fs::remove_all(dir);
}

// The refusals name the flags and their values (train/run_setup.cpp checks them before anything
// is built; the cut is checked by distributed::rank_chunks).
TEST(TrainGptInterleaved, BadCombinationsAreRefusedNamingTheFlags) {
  const fs::path dir = loom::testing_support::fresh_temp_dir("gpt_interleaved_bad");
  const std::string text = write_text(dir);
  struct Case {
    int procs;
    std::string flags, message;
    int layers = 4;
  };
  const std::vector<Case> cases = {
      {1, "--pp-schedule interleaved --pp-virtual-stages 2",
       "--pp-schedule interleaved needs --pp 2 or more and --pp-virtual-stages 2 or more (got "
       "--pp 1, --pp-virtual-stages 2)"},
      {1, "--pp-virtual-stages 2",
       "--pp-virtual-stages 2 needs --pp-schedule interleaved (got --pp-schedule 1f1b"},
      {2, "--pp 2 --pp-schedule interleaved",
       "--pp-schedule interleaved needs --pp 2 or more and --pp-virtual-stages 2 or more (got "
       "--pp 2, --pp-virtual-stages 1)"},
      {2, kInterleaved + " --grad-accum 1",
       "--pp-schedule interleaved runs the micro-batches in groups of --pp: --grad-accum 1 is not "
       "a multiple of --pp 2"},
      {2, kInterleaved + " --grad-accum 2",
       "--pp 2 x --pp-virtual-stages 2 = 4 chunks do not divide the 2 blocks of GPT", 2},
      {2, kInterleaved + " --grad-accum 2 --zero 3",
       "--pp-schedule interleaved with --zero 3: FSDP over a pipeline stage shards one stage per "
       "rank"},
  };
  for (const Case& c : cases) {
    CommandRun r = run_command(gpt(c.procs, text, "--max-steps 1 " + c.flags, c.layers));
    EXPECT_NE(r.exit_code, 0) << c.flags << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.flags << ": " << r.output;
  }
  fs::remove_all(dir);
}

}  // namespace
