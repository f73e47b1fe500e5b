// embedding: values and shapes for ids of every rank, the weight's gradient against a float64
// loop, and Backend::embedding_backward on the CPU: equal bit for bit to its oracle index_add in
// float32/float64, summing f16/bf16 in float32 (where index_add's per-add rounding stalls), the
// same bits on every run and with any number of threads. Bad calls: test_embedding_errors.cpp.
// Leaves out: the op table's rows (tests/autograd/cases_embedding_attention.cpp) and the GPU
// (test_cuda_embedding.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/parallel.h"
#include "kernels/backend.h"

namespace loom {
namespace {

Tensor ids_of(const std::vector<int64_t>& v, const Shape& s) { return from_vector<int64_t>(v, s); }

// Random ids in [0, V) with a heavy head: half of them are id 0 or 1 (a GPT's frequent tokens).
Tensor skewed_ids(int64_t n, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> u = randint(0, V, {n}, {.dtype = kI64}, &gen).to_vector<int64_t>();
  for (size_t i = 0; i < u.size(); i += 2) u[i] %= 2;
  return ids_of(u, {n});
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(),
                     size_t(a.numel()) * a.element_size()) == 0;
}

TEST(Embedding, GathersRowsForIdsOfAnyRank) {
  Tensor w = from_vector<double>({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor y = embedding(w, ids_of({2, 0, 2, 1}, {2, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
  Tensor s = embedding(w, ids_of({1}, {}));  // a 0-d id: one row of D
  EXPECT_EQ(s.shape(), (Shape{2}));
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{10, 11}));
  Tensor e = embedding(w, ids_of({}, {0, 4}));  // no ids
  EXPECT_EQ(e.shape(), (Shape{0, 4, 2}));
}

TEST(Embedding, WeightGradientMatchesFloat64Loop) {
  const int64_t V = 6, D = 5;
  Generator gen(3);
  Tensor w = randn({V, D}, {.dtype = kF64}, &gen).requires_grad_(true);
  Tensor ids = ids_of({4, 1, 4, 4, 0, 1, 5, 4, 1, 0, 4, 2}, {3, 4});  // row 3 never appears
  Tensor r = randn({3, 4, D}, {.dtype = kF64}, &gen);
  (embedding(w, ids) * r).sum().backward();
  std::vector<double> want(size_t(V * D), 0.0), rv = r.to_vector<double>();
  std::vector<int64_t> iv = ids.to_vector<int64_t>();
  for (size_t p = 0; p < iv.size(); ++p)
    for (int64_t d = 0; d < D; ++d) want[size_t(iv[p] * D + d)] += rv[p * size_t(D) + size_t(d)];
  std::vector<double> got = w.grad().to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "element " << i;
  for (int64_t d = 0; d < D; ++d) EXPECT_EQ(got[size_t(3 * D + d)], 0.0);  // the unused row
}

TEST(EmbeddingBackward, EqualsTheIndexAddOracleBitForBitInFloat32AndFloat64) {
  Backend& be = backend_for(kCPU);
  for (DType dt : {kF32, kF64}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t N = 3001, V = 37, D = 19;
    Generator gen(11);
    Tensor g = randn({N, D}, {.dtype = dt}, &gen);
    Tensor ids = skewed_ids(N, V, 12);
    // Both add each row's gradients in position order in acc_t, starting from zero.
    Tensor got = be.embedding_backward(g, ids, V);
    Tensor want = be.index_add({V, D}, 0, ids, g);
    EXPECT_TRUE(bit_equal(got, want));
  }
}

TEST(EmbeddingBackward, HalfTypesAccumulateInFloat32AndRoundOnce) {
  // 1000 gradients of 1 into one row: the sum 1000 is exact in bf16 and f16, but rounding after
  // every add (index_add's way) stops at 256 in bf16, where 256 + 1 rounds back to 256.
  Backend& be = backend_for(kCPU);
  const int64_t N = 1000, D = 3;
  Tensor ids = zeros({N}, {.dtype = kI64});
  for (DType dt : {kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor got = be.embedding_backward(ones({N, D}, {.dtype = dt}), ids, 2);
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_EQ(got.to_vector<double>(), (std::vector<double>{1000, 1000, 1000, 0, 0, 0}));
  }
  Tensor stalled = be.index_add({2, D}, 0, ids, ones({N, D}, {.dtype = kBF16}));
  EXPECT_EQ(stalled.to_vector<double>()[0], 256.0);  // why the half types need the float sum
  // Random bf16 gradients: the float32 sum rounded once to bf16 is within one bf16 rounding
  // (2^-8 relative at most) of the float64 sum of the same values, plus 1e-3 for the float32
  // sum's own error (sums of about 2000 terms of size 1 lose far less).
  const int64_t M = 4000, V = 9, W = 7;
  Generator gen(5);
  Tensor g = randn({M, W}, {.dtype = kF64}, &gen).to(kBF16);
  Tensor rid = skewed_ids(M, V, 6);
  Tensor want = be.index_add({V, W}, 0, rid, g.to(kF64));
  std::vector<double> w = want.to_vector<double>(),
                      b = be.embedding_backward(g, rid, V).to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i)
    EXPECT_NEAR(b[i], w[i], std::fabs(w[i]) / 256 + 1e-3) << "element " << i;
}

TEST(EmbeddingBackward, SameBitsOnEveryRunAndWithAnyThreadCount) {
  // Many repeats of few ids, large enough that the work is split between threads.
  Backend& be = backend_for(kCPU);
  const int64_t N = 20000, V = 7, D = 65;
  Generator gen(21);
  Tensor g = randn({N, D}, {.dtype = kF32}, &gen);
  Tensor ids = skewed_ids(N, V, 22);
  Tensor first = be.embedding_backward(g, ids, V);
  EXPECT_TRUE(bit_equal(first, be.embedding_backward(g, ids, V)));
  const int threads = cpu::num_threads();
  cpu::set_num_threads(1);
  Tensor one_thread = be.embedding_backward(g, ids, V);
  cpu::set_num_threads(threads);
  EXPECT_TRUE(bit_equal(first, one_thread));
  // And through the op: two backward passes give bit-identical gradients.
  Tensor w = randn({V, D}, {}, &gen).requires_grad_(true);
  Tensor r = randn({N, D}, {}, &gen);
  (embedding(w, ids) * r).sum().backward();
  Tensor g1 = w.grad().clone();
  w.set_grad(Tensor());
  (embedding(w, ids) * r).sum().backward();
  EXPECT_TRUE(bit_equal(g1, w.grad()));
}

}  // namespace
}  // namespace loom
