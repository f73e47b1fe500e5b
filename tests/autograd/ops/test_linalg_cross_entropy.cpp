// linear_cross_entropy (Note [The classifier in one node] in autograd/ops/linalg.cpp) against
// cross_entropy(linear(x, W)) in float32: the loss and the gradients of x and W for Mean and Sum,
// a 3-d input, ignored rows, label smoothing, a seed other than 1 (the multiplier m of the
// backward) and a vocabulary-sized row; one autograd node; without grad mode and for
// Reduction::None it is the composite; bad targets are named; the rows in chunks of every size
// (Note [The classifier in chunks]) give the same values, also with a wholly ignored chunk, with
// every row ignored and with a retained graph. The op table
// (cases_softmax_loss.cpp) checks it against float64 references and finite differences, and
// CudaLinearCrossEntropy the GPU's one-pass kernel against these CPU values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "kernels/backend.h"

using namespace loom;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.detach().to(kF64) - b.detach().to(kF64))).item();
}

struct Result {
  Tensor loss, dx, dw;
};

// The loss of x (B, T, K) against w (V, K), seeded with `seed`, by the op (in chunks of
// chunk_rows rows; 0 picks) or composed.
Result run(bool fused, const Tensor& x0, const Tensor& w0, const Tensor& target, Reduction r,
           double ls, int64_t ignore, double seed, int64_t chunk_rows = 0) {
  Tensor x = x0.detach().clone().requires_grad_(true), w = w0.detach().clone().requires_grad_(true);
  Tensor loss = fused ? linear_cross_entropy(x, w, target, r, ls, ignore, chunk_rows)
                      : cross_entropy(flatten(linear(x, w), 0, 1), flatten(target), r, ls, ignore);
  loss.backward(ones_like(loss) * seed);
  return {loss.detach(), x.grad(), w.grad()};
}

}  // namespace

TEST(LinearCrossEntropy, MatchesTheLinearAndCrossEntropyComposed) {
  Generator gen(5);
  for (int64_t V : {int64_t(11), int64_t(2000)}) {  // 2000: the fused cross_entropy's size
    Tensor x = randn({3, 7, 16}, {}, &gen), w = randn({V, 16}, {}, &gen) * 0.3;
    Tensor target = randint(0, V, {3, 7}, {.dtype = kI64}, &gen);
    target.data<int64_t>()[5] = -1;
    for (Reduction r : {Reduction::Mean, Reduction::Sum})
      for (double ls : {0.0, 0.2}) {
        SCOPED_TRACE("V " + std::to_string(V) + (r == Reduction::Mean ? " mean" : " sum") + " ls " +
                     std::to_string(ls));
        Result a = run(true, x, w, target, r, ls, -1, 0.75),
               b = run(false, x, w, target, r, ls, -1, 0.75);
        EXPECT_NEAR(a.loss.item(), b.loss.item(), 2e-6 * std::abs(b.loss.item()));
        EXPECT_LT(max_abs_diff(a.dx, b.dx), 2e-6);
        EXPECT_LT(max_abs_diff(a.dw, b.dw), 2e-6);
        EXPECT_GT(max(abs(a.dx)).item(), 1e-3) << "the gradients must be there to compare";
        // The ignored row sends nothing back.
        EXPECT_EQ(max(abs(a.dx.reshape({21, 16}).select(0, 5))).item(), 0.0);
      }
  }
}

TEST(LinearCrossEntropy, IsOneNodeAndTheCompositeWithoutAGradient) {
  Generator gen(6);
  Tensor x = randn({8, 4}, {}, &gen).requires_grad_(true), w = randn({5, 4}, {}, &gen);
  Tensor target = randint(0, 5, {8}, {.dtype = kI64}, &gen);
  Tensor loss = linear_cross_entropy(x, w, target);
  ASSERT_TRUE(loss.grad_fn());
  EXPECT_EQ(std::string(loss.grad_fn()->name), "linear_cross_entropy");
  Tensor composed = cross_entropy(linear(x, w), target);
  {
    NoGradGuard g;
    EXPECT_NEAR(linear_cross_entropy(x, w, target).item(), composed.item(), 1e-6);
  }
  Tensor none = linear_cross_entropy(x, w, target, Reduction::None);
  EXPECT_EQ(none.shape(), Shape{8});
  EXPECT_LT(max_abs_diff(none, cross_entropy(linear(x, w), target, Reduction::None)), 1e-6);
}

TEST(LinearCrossEntropy, BadTargetsAreNamed) {
  Tensor x = randn({6, 4}).requires_grad_(true), w = randn({5, 4});
  auto message = [&](const Tensor& t) {
    try {
      linear_cross_entropy(x, w, t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string rows = message(zeros({5}, {.dtype = kI64}));
  EXPECT_NE(rows.find("linear_cross_entropy"), std::string::npos) << rows;
  EXPECT_NE(rows.find("[5]"), std::string::npos) << rows;
  EXPECT_NE(rows.find("[6, 4]"), std::string::npos) << rows;
  EXPECT_NE(message(zeros({6})).find("int64"), std::string::npos);
  const std::string range = message(full({6}, 7.0, {.dtype = kI64}));
  EXPECT_NE(range.find("7"), std::string::npos) << range;
}

TEST(LinearCrossEntropy, ChunksOfRowsGiveTheValuesOfOne) {
  Generator gen(7);
  const int64_t V = 300;
  Tensor x = randn({3, 7, 16}, {}, &gen), w = randn({V, 16}, {}, &gen) * 0.3;
  Tensor target = randint(0, V, {3, 7}, {.dtype = kI64}, &gen);
  for (int i = 4; i < 8; ++i) target.data<int64_t>()[i] = -1;  // chunk_rows 4: chunk 1 ignored
  target.data<int64_t>()[13] = -1;
  for (int64_t chunk_rows : {1, 4, 5, 8, 20, 21, 64})
    for (Reduction r : {Reduction::Mean, Reduction::Sum})
      for (double ls : {0.0, 0.2}) {
        SCOPED_TRACE(
            str("chunk_rows ", chunk_rows, r == Reduction::Mean ? " mean" : " sum", " ls ", ls));
        Result a = run(true, x, w, target, r, ls, -1, 1.5, chunk_rows),
               b = run(false, x, w, target, r, ls, -1, 1.5);
        EXPECT_NEAR(a.loss.item(), b.loss.item(), 2e-6 * std::abs(b.loss.item()));
        EXPECT_LT(max_abs_diff(a.dx, b.dx), 2e-6);
        EXPECT_LT(max_abs_diff(a.dw, b.dw), 2e-6);
        EXPECT_EQ(max(abs(a.dx.reshape({21, 16}).select(0, 13))).item(), 0.0);
      }
}

TEST(LinearCrossEntropy, EveryRowIgnoredIsNaNAsCrossEntropy) {
  Tensor x = randn({6, 4}).requires_grad_(true), w = randn({5, 4});
  Tensor target = full({6}, -1.0, {.dtype = kI64});
  EXPECT_TRUE(std::isnan(cross_entropy(linear(x, w), target, Reduction::Mean, 0.0, -1).item()));
  for (int64_t chunk_rows : {0, 2})
    EXPECT_TRUE(
        std::isnan(linear_cross_entropy(x, w, target, Reduction::Mean, 0.0, -1, chunk_rows).item()))
        << chunk_rows;
}

TEST(LinearCrossEntropy, ARetainedGraphGivesTheSameGradientsTwice) {
  Generator gen(8);
  Tensor x = randn({9, 8}, {}, &gen).requires_grad_(true);
  Tensor w = randn({13, 8}, {}, &gen).requires_grad_(true);
  Tensor target = randint(0, 13, {9}, {.dtype = kI64}, &gen);
  Tensor loss = linear_cross_entropy(x, w, target, Reduction::Mean, 0.0, -100, 4);
  autograd::backward(loss, Tensor(), /*retain_graph=*/true);
  const Tensor dx1 = x.grad().clone(), dw1 = w.grad().clone();
  autograd::backward(loss);  // the second backward scales what the first left unscaled
  EXPECT_LT(max_abs_diff(x.grad(), dx1 * 2.0), 1e-6);
  EXPECT_LT(max_abs_diff(w.grad(), dw1 * 2.0), 1e-6);
}

TEST(LinearCrossEntropy, ChunkRowsKeepEachChunksLogitsUnder3Times2To27) {
  EXPECT_EQ(detail::classifier_chunk_rows(10, 11), 10);
  EXPECT_EQ(detail::classifier_chunk_rows(49152, 8192), 49152);  // exactly 3 x 2^27: one chunk
  EXPECT_EQ(detail::classifier_chunk_rows(49153, 8192), 24584);  // two, rounded up to 8 rows
  // GPT-2 124M, B 16, T 1024: three chunks of 5464 rows (5456 in the last).
  const int64_t R = detail::classifier_chunk_rows(16384, 50304);
  EXPECT_EQ(R, 5464);
  EXPECT_LE(R * 50304, int64_t(3) << 27);
  EXPECT_EQ(detail::classifier_chunk_rows(0, 50304), 0);
}

TEST(LinearCrossEntropy, NegativeChunkRowsAreNamed) {
  Tensor x = randn({6, 4}).requires_grad_(true), w = randn({5, 4});
  Tensor target = zeros({6}, {.dtype = kI64});
  try {
    linear_cross_entropy(x, w, target, Reduction::Mean, 0.0, -100, -3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk_rows must be >= 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("-3"), std::string::npos) << e.what();
  }
}

TEST(ScaleBy, SixteenBitTensorsTakeAFloat32Factor) {
  Tensor a = from_vector<float>({1.0f, -3.0f, 0.5f, 1000.0f}, {4}).to(kBF16);
  Tensor f = full({}, 1.0 / 3.0);
  backend_for(kCPU).scale_by_({a}, f);
  const auto got = a.to(kF32).to_vector<float>();
  const std::vector<float> in{1.0f, -3.0f, 0.5f, 1000.0f};
  for (size_t i = 0; i < in.size(); ++i)  // the float32 product rounded once to bfloat16
    EXPECT_EQ(got[i], float(BFloat16(in[i] * (1.0f / 3.0f)))) << i;
  EXPECT_THROW(backend_for(kCPU).scale_by_({a}, full({}, 2.0, {.dtype = kBF16})), Error);
}
