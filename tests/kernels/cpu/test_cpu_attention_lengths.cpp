// kernels/cpu/cpu_attention.cpp with key lengths (a padding mask for right-padded rows, Note [Key
// lengths] in autograd/ops/attention.cpp): the CPU twin's forward and backward against the
// attention op's composite with the same lengths in float64 (scores masked with the dtype's most
// negative value, autograd's gradients), causal and not, grouped-query heads, one query against
// many keys (a decode step over a static cache); each row equal to the twin run on that row's
// keys alone; zero dk and dv at padded keys; the errors. Leaves out: the GPU
// (test_cuda_attention_lengths.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"
#include "support/errors.h"

using namespace loom;

namespace {

cpu::CpuBackend& be() { return cpu::cpu_backend(); }

Tensor randn_t(const Shape& s, uint64_t seed) {
  Tensor t = empty(s, {.dtype = kF64});
  be().random_(t, RandomKind::Normal, 0.0, 1.0, seed, 0);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return max(abs(raw::contiguous(a) - raw::contiguous(b))).item();
}

struct Case {
  int64_t B, H, Hkv, Tq, Tk, D;
  bool causal;
  std::vector<int64_t> lengths;  // B of them, in [1, Tk]
  std::string name() const {
    return "H" + std::to_string(H) + "Hkv" + std::to_string(Hkv) + "Tq" + std::to_string(Tq) +
           "Tk" + std::to_string(Tk) + (causal ? "causal" : "");
  }
};

std::vector<Case> cases() {
  return {{3, 2, 2, 6, 6, 4, false, {6, 3, 1}},
          {3, 2, 2, 6, 6, 4, true, {6, 3, 1}},
          {2, 4, 2, 5, 7, 3, false, {2, 7}},
          {2, 4, 1, 1, 9, 4, false, {4, 9}},  // one query over a cache of 9 slots
          {2, 3, 3, 8, 8, 5, true, {5, 8}}};
}

Tensor lengths_of(const Case& c) {
  Tensor t = empty({c.B}, {.dtype = kI64});
  std::copy(c.lengths.begin(), c.lengths.end(), t.data<int64_t>());
  return t;
}

TEST(CpuAttentionLengths, ForwardAndBackwardEqualTheCompositeWithTheMask) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name());
    const double scale = 0.6;
    Tensor q = randn_t({c.B, c.H, c.Tq, c.D}, 1), k = randn_t({c.B, c.Hkv, c.Tk, c.D}, 2),
           v = randn_t({c.B, c.Hkv, c.Tk, c.D}, 3), go = randn_t({c.B, c.H, c.Tq, c.D}, 4);
    const Tensor lengths = lengths_of(c);
    auto [out, stats] = be().sdpa_forward(q, k, v, c.causal, scale, lengths);
    SdpaGrads g = be().sdpa_backward(go, q, k, v, out, stats, c.causal, scale, {}, lengths);

    Tensor qa = q.detach().requires_grad_(true), ka = k.detach().requires_grad_(true),
           va = v.detach().requires_grad_(true);
    Tensor want = scaled_dot_product_attention_composite(qa, ka, va, lengths, c.causal, scale, 0.0);
    (want * go).sum().backward();
    EXPECT_LE(max_diff(out, want.detach()), 1e-12);
    EXPECT_LE(max_diff(g.dq, qa.grad()), 1e-12);
    EXPECT_LE(max_diff(g.dk, ka.grad()), 1e-12);
    EXPECT_LE(max_diff(g.dv, va.grad()), 1e-12);
  }
}

// Row b of a padded batch is the same attention over its own len[b] keys alone, and its padded
// keys get no gradient at all (exact zeros, not small numbers).
TEST(CpuAttentionLengths, EachRowIsItsOwnKeysAlone) {
  const int64_t B = 3, H = 2, T = 7, D = 4;
  const std::vector<int64_t> len{7, 4, 1};
  Tensor q = randn_t({B, H, T, D}, 5), k = randn_t({B, H, T, D}, 6), v = randn_t({B, H, T, D}, 7),
         go = randn_t({B, H, T, D}, 8);
  Case c{B, H, H, T, T, D, false, len};
  auto [out, stats] = be().sdpa_forward(q, k, v, false, 0.5, lengths_of(c));
  SdpaGrads g = be().sdpa_backward(go, q, k, v, out, stats, false, 0.5, {}, lengths_of(c));
  for (int64_t b = 0; b < B; ++b) {
    SCOPED_TRACE("row " + std::to_string(b));
    auto row = [&](const Tensor& x, int64_t t) {
      return raw::contiguous(raw::slice(raw::slice(x, 0, b, b + 1, 1), 2, 0, t, 1));
    };
    auto [alone, alone_stats] =
        be().sdpa_forward(row(q, T), row(k, len[size_t(b)]), row(v, len[size_t(b)]), false, 0.5);
    EXPECT_LE(max_diff(row(out, T), alone), 1e-14);
    const int64_t pad = T - len[size_t(b)];
    if (pad == 0) continue;
    auto padded = [&](const Tensor& x) {
      return raw::contiguous(raw::slice(raw::slice(x, 0, b, b + 1, 1), 2, len[size_t(b)], T, 1));
    };
    EXPECT_EQ(max(abs(padded(g.dk))).item(), 0.0);
    EXPECT_EQ(max(abs(padded(g.dv))).item(), 0.0);
  }
}

TEST(CpuAttentionLengths, BadLengthsNameTheOpAndTheTensor) {
  Tensor q = randn_t({2, 2, 4, 8}, 1);
  Tensor wrong_size = zeros({3}, {.dtype = kI64}), floats = ones({2}, {.dtype = kF32});
  test::expect_error([&] { be().sdpa_forward(q, q, q, false, 1.0, wrong_size); },
                     {"sdpa_forward: key_lengths must be (B) = (2)", "[3]"});
  test::expect_error([&] { be().sdpa_forward(q, q, q, false, 1.0, floats); },
                     {"sdpa_forward: key_lengths", "int32 or int64", "float32"});
  Tensor too_long = full({2}, 5.0, {.dtype = kI32});
  test::expect_error([&] { be().sdpa_forward(q, q, q, false, 1.0, too_long); },
                     {"key_lengths holds 5, outside [1, Tk = 4]"});
}

}  // namespace
