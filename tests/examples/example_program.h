// Runs the example programs for the tests of tests/examples: train_mlp with stdout and stderr
// apart, any command line with a time limit, fresh folders, the numbers the output states, and
// how far apart two checkpoints' weights are.
// Leaves out: loomrun's own options (the tests spell the command line).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"

namespace loom::testing_support {

struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

// Runs TRAIN_MLP_BIN with `args` (a shell fragment) for at most `seconds`.
inline ProgramRun run_train_mlp(const std::string& args, int seconds = 300) {
  std::string err_file =
      (std::filesystem::temp_directory_path() / ("loom_example_err_" + std::to_string(::getpid())))
          .string();
  std::string line = "timeout -k 5 " + std::to_string(seconds) + " " + TRAIN_MLP_BIN + " " + args +
                     " 2>" + err_file;
  ProgramRun r;
  FILE* p = popen(line.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

// A command line's exit code (-1 when it did not exit) and its stdout and stderr together, with
// a hard time limit.
struct CommandRun {
  int exit_code = -1;
  std::string output;
};

inline CommandRun run_command(const std::string& cmd, int seconds = 300) {
  std::string line = "timeout -k 5 " + std::to_string(seconds) + " " + cmd + " 2>&1";
  CommandRun r;
  FILE* p = popen(line.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A fresh, empty folder under the temporary directory, named for `name` and this process.
inline std::filesystem::path fresh_temp_dir(const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() /
                            ("loom_example_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

// The N of "... after N steps" in the final line (or "N steps in" without an evaluation), -1
// when there is none.
inline long steps_run(const std::string& out) {
  std::smatch m;
  if (std::regex_search(out, m, std::regex("after ([0-9]+) steps in"))) return std::stol(m[1]);
  if (std::regex_search(out, m, std::regex(": ([0-9]+) steps in"))) return std::stol(m[1]);
  return -1;
}

// The test loss of the last epoch summary ("test loss 0.4123"), or "" without one.
inline std::string last_test_loss(const std::string& out) {
  std::string found;
  std::regex re("test loss ([0-9.]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    found = (*it)[1];
  return found;
}

// The largest difference between the model tensors of two checkpoints (their names must agree).
inline double max_weight_difference(const std::filesystem::path& a,
                                    const std::filesystem::path& b) {
  auto sa = load_checkpoint(a.string()), sb = load_checkpoint(b.string());
  EXPECT_EQ(sa.model.size(), sb.model.size());
  double worst = 0;
  for (size_t i = 0; i < sa.model.size() && i < sb.model.size(); ++i) {
    EXPECT_EQ(sa.model[i].first, sb.model[i].first);
    worst = std::max(worst, max(abs(sa.model[i].second - sb.model[i].second)).item());
  }
  return worst;
}

}  // namespace loom::testing_support
