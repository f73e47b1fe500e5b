// Helpers for the tests against Hugging Face transformers' fixtures (tests/nn/golden/hf/, made by
// scripts/make-hf-fixtures.py): a fixture's path, the scale-relative error the parity tolerances
// bound, the labels transformers computes its loss with, and id lists. Leaves out: reading the
// values (tests/support/golden_file.h) and the tolerances (Note [HF parity tolerances] in
// tests/nn/test_hf_gpt2.cpp has them and their reasons).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "support/golden_file.h"

namespace loom::test {

// A file or folder of tests/nn/golden/hf/.
inline std::string hf_fixture(const std::string& name) { return golden_dir() + "hf/" + name; }

// max |got - want| / max |want|, on the host in float64: relative to the tensor's scale, so
// entries near zero (most logits of a random model, most of an embedding's gradient) are held to
// the same absolute bound as the large ones instead of an undefined relative error.
inline double relative_error(const Tensor& got, const Tensor& want) {
  auto a = got.to(kCPU).to_vector<double>(), b = want.to(kCPU).to_vector<double>();
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return worst / scale;
}

// ids: (B, T) int64 on the CPU -> (B, T): the labels transformers shifts them into, position t
// predicting id t + 1; the last position has no target (-1, which the models' loss ignores).
inline Tensor shifted_targets(const Tensor& ids) {
  Tensor t = full(ids.shape(), -1.0, {.dtype = kI64});
  NoGradGuard g;
  slice(t, 1, 0, ids.size(1) - 1).copy_(slice(ids, 1, 1, ids.size(1)));
  return t;
}

// A golden file's ids (stored as float64) as integers.
inline std::vector<int64_t> int_list(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector<double>()) out.push_back(int64_t(v));
  return out;
}

}  // namespace loom::test
