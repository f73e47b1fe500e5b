// What the tests of train_gpt's parallel layouts share (test_train_gpt_interleaved.cpp,
// test_train_gpt_3d.cpp): a seeded text, the command line of a small GPT run (under loomrun for
// more than one process), the validation losses it prints, and a checkpoint resumed under another
// layout. Leaves out: running commands and comparing checkpoints (example_program.h).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "tests/examples/example_program.h"

namespace loom::testing_support {

// About 30 KB of sentences from a small grammar (seeded), written to dir/text.txt; its path.
inline std::string write_small_text(const std::filesystem::path& dir) {
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

inline const std::string kSmallGpt = " --n-embd 32 --n-head 2";  // one head per tp rank of 2

// A GPT (or `model`) of `layers` blocks on 32-token windows, 8 per step, on the CPU; under loomrun
// for procs > 1.
inline std::string small_gpt(int procs, const std::string& text, const std::string& args,
                             int layers = 4, const std::string& model = kSmallGpt) {
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
inline std::vector<double> val_losses(const std::string& out) {
  std::vector<double> v;
  std::regex re("val loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

// `from`'s step-3 checkpoint resumed under `layout` on `procs` processes (a small_gpt run with
// `common` flags, in dir/name) ends at `one`'s step-6 weights (1e-5).
inline void expect_resumes(const std::filesystem::path& dir, const std::string& text,
                           const std::string& common, const std::filesystem::path& one,
                           const std::filesystem::path& from, const std::string& name,
                           const std::string& layout, int procs) {
  const std::filesystem::path mid = "ckpt-00000003.safetensors", last = "ckpt-00000006.safetensors";
  const std::filesystem::path to = dir / name;
  std::filesystem::create_directories(to);
  std::filesystem::copy_file(from / mid, to / mid);
  CommandRun r = run_command(small_gpt(procs, text, common + to.string() + layout + " --resume"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LE(max_weight_difference(one / last, to / last), 1e-5) << name;
}

// The run `b` (its checkpoints in b_dir) ended where the one-process run `a` (in a_dir) did: the
// step-6 weights within 1e-5 (float32 sums in other orders) and the two validation losses within
// 1.5e-4 (4 printed decimals).
inline void expect_same_training(const CommandRun& a, const std::filesystem::path& a_dir,
                                 const CommandRun& b, const std::filesystem::path& b_dir) {
  const std::filesystem::path last = "ckpt-00000006.safetensors";
  EXPECT_LE(max_weight_difference(a_dir / last, b_dir / last), 1e-5);
  const std::vector<double> va = val_losses(a.output), vb = val_losses(b.output);
  ASSERT_EQ(va.size(), 2u) << a.output;
  ASSERT_EQ(vb.size(), 2u) << b.output;
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(vb[i], va[i], 1.5e-4) << b.output;
}

}  // namespace loom::testing_support
