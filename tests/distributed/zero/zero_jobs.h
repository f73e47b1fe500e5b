// What the ZeRO and FSDP tests share: zero_tool jobs on N Gloo (or NCCL) ranks, their final weights
// and printed numbers, and comparisons of named tensors. Leaves out: the tests themselves
// (test_zero_optimizer.cpp, ../fsdp/test_fsdp.cpp) and the worker (zero_tool.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../ddp/ddp_case.h"
#include "autograd/grad_mode.h"
#include "distributed/spawn.h"
#include "nn/module.h"
#include "nn/serialize.h"

namespace loom::test {

inline std::string temp_dir() {
  char t[] = "/tmp/loom-zero-XXXXXX";
  return mkdtemp(t);
}

inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  NoGradGuard g;
  return max(abs(a.detach().to(kF64) - b.detach().to(kF64))).item();
}

inline double worst_diff(const NamedTensors& a, const NamedTensors& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, max_abs_diff(a[i].second, b[i].second));
  }
  return worst;
}

inline bool bitwise_equal(const NamedTensors& a, const NamedTensors& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor &x = a[i].second, &y = b[i].second;
    if (x.numel() != y.numel() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()) != 0)
      return false;
  }
  return true;
}

struct Job {
  std::string dir;
  WorkerRun run;
  NamedTensors final_of(int rank) const {
    return load_safetensors(dir + "/final_rank" + std::to_string(rank) + ".safetensors").tensors;
  }
  // The number after `key` in rank r's output ("memory params 123 ...": value("grads", r)).
  int64_t value(const std::string& key, int r) const {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(run.output[r], m, std::regex(key + " (-?[0-9]+)")))
        << key << " not in rank " << r << "'s output:\n"
        << run.summary();
    return m.empty() ? -1 : std::stoll(m[1]);
  }
};

// zero_tool train on `world` Gloo ranks; every rank must exit 0.
inline Job run_zero(int world, const std::string& dtype, int zero, int steps,
                    std::vector<std::string> extra = {}, std::string dir = "") {
  Job j{dir.empty() ? temp_dir() : dir, {}};
  std::vector<std::string> args{"train", dtype, std::to_string(zero), std::to_string(steps), j.dir};
  args.insert(args.end(), extra.begin(), extra.end());
  j.run =
      run_workers(LOOM_ZERO_TOOL, args, world, free_port(), {{"LOOM_TEST_BACKEND", "gloo"}}, 240);
  EXPECT_FALSE(j.run.timed_out) << j.run.summary();
  for (int r = 0; r < world; ++r) EXPECT_EQ(j.run.exit_codes[r], 0) << j.run.summary();
  return j;
}

// zero_tool <args...> <new temp dir> on `world` Gloo ranks (its other modes: grads, mp_reference);
// every rank must exit 0.
inline Job run_zero_mode(int world, std::vector<std::string> args) {
  Job j{temp_dir(), {}};
  args.push_back(j.dir);
  j.run =
      run_workers(LOOM_ZERO_TOOL, args, world, free_port(), {{"LOOM_TEST_BACKEND", "gloo"}}, 240);
  EXPECT_FALSE(j.run.timed_out) << j.run.summary();
  for (int r = 0; r < world; ++r) EXPECT_EQ(j.run.exit_codes[r], 0) << j.run.summary();
  return j;
}

// The fp32 weights after `steps` steps of FSDP's mixed-precision arithmetic for `world` ranks,
// written out in one process (zero_tool mp_reference, Note [FSDP mixed precision] in
// distributed/fsdp/fsdp.h).
inline NamedTensors mp_reference(int world, int steps) {
  Job j = run_zero_mode(1, {"mp_reference", std::to_string(world), std::to_string(steps)});
  NamedTensors out = load_safetensors(j.dir + "/reference.safetensors").tensors;
  std::filesystem::remove_all(j.dir);
  return out;
}

// Every rank ends with the same weights, bitwise (they are all-gathered from the shards).
inline void expect_ranks_agree(const Job& j, int world) {
  for (int r = 1; r < world; ++r)
    EXPECT_TRUE(bitwise_equal(j.final_of(r), j.final_of(0))) << "rank " << r << " differs";
}

// The clip norms zero_tool printed ("norms 0.1 0.2 ...") on every rank of z equal those of rank 0
// of the reference job (within tol), for every step; the first is above max_norm, or the clip
// would not act and the comparison would mean little.
inline std::vector<double> printed_norms(const std::string& out) {
  std::istringstream in(out.substr(out.find("norms") + 5));
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

inline void expect_same_clip_norms(const Job& ref, const Job& z, int world, double max_norm,
                                   double tol) {
  const auto want = printed_norms(ref.run.output[0]);
  ASSERT_FALSE(want.empty()) << ref.run.output[0];
  EXPECT_GT(want[0], max_norm) << "the clip must be active for the test to mean anything";
  for (int r = 0; r < world; ++r) {
    const auto got = printed_norms(z.run.output[r]);
    ASSERT_EQ(got.size(), want.size()) << z.run.summary();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "rank " << r;
  }
}

}  // namespace loom::test
