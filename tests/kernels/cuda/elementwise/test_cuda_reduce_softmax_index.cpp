// CUDA against CPU for reductions (every layout path: warp rows, block rows, split rows, columns,
// split columns, permuted), max_dim, softmax / log_softmax and their backward, nll_loss with
// ignored rows, index_select, index_add and dropout; the fast kernels against their naive ones;
// and out-of-range indices reported as errors by the kernels.
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/amp/autocast.h"
#include "kernels/backend.h"
#include "support/cuda_test_util.h"
#ifdef LOOM_WITH_CUDA
#include "kernels/cuda/launch.h"
#endif

namespace loom::testing {
namespace {

const Device kGpu = cuda_device(0);

Tensor sample(const Shape& s, DType d, uint64_t seed, bool positive = false) {
  Generator gen(seed);
  if (!is_floating(d)) return randint(0, 8, s, {.dtype = DType::I64}, &gen).to(d);
  Tensor t = positive ? uniform(s, 0.5, 2.0, {.dtype = DType::F64}, &gen)
                      : randn(s, {.dtype = DType::F64}, &gen);
  return t.to(d);
}

// Sums of n positive values: float accumulation in a different order from the CPU's double.
double sum_tol(DType d) {
  switch (d) {
    case DType::F32:
      return 2e-5;
    case DType::F16:
      return 2e-3;
    case DType::BF16:
      return 1e-2;
    case DType::F64:
      return 1e-12;
    default:
      return 0.0;
  }
}

struct ReduceLayout {
  Shape shape;
  std::vector<int64_t> dims;
  bool transpose;  // reduce a transposed view of the tensor
  const char* path;
};

const ReduceLayout kLayouts[] = {
    {{3000000}, {}, false, "all, split rows"},
    {{300, 5000}, {1}, false, "block rows"},
    {{20000, 37}, {1}, false, "warp rows"},
    {{4, 100000}, {1}, false, "few long rows, split"},
    {{200000, 3}, {0}, false, "columns, split"},
    {{600, 700}, {0}, false, "columns"},
    {{30, 40, 50}, {1}, false, "middle dim, permuted copy"},
    {{40, 30, 20}, {0, 2}, false, "two dims"},
    {{700, 600}, {1}, true, "transposed view"},
    {{1}, {}, false, "single element"},
};

TEST(CudaReduce, EveryOpLayoutAndDtypeMatchesCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d :
       {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8}) {
    for (const ReduceLayout& l : kLayouts) {
      Tensor x = sample(l.shape, d, 81, true);
      if (l.transpose) x = x.t();
      Tensor g = x.to(kGpu);
      if (l.transpose) g = x.t().to(kGpu).t();
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
        if (op == ReduceOp::Mean && !is_floating(d)) continue;
        for (bool keep : {false, true}) {
          SCOPED_TRACE(str(dtype_name(d), " ", l.path, " op ", int(op), " keepdim ", keep));
          Tensor want = backend_for(kCPU).reduce(op, x, l.dims, keep);
          Tensor got = backend_for(kGpu).reduce(op, g, l.dims, keep);
          bool summing = op == ReduceOp::Sum || op == ReduceOp::Mean;
          EXPECT_TRUE(all_close(want, got, summing ? sum_tol(d) : 0.0));
        }
      }
    }
  }
}

TEST(CudaReduce, NanPropagatesAndEmptyReductionsFollowTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = sample({6, 3000}, DType::F32, 82);
  float* p = x.data<float>();
  p[2 * 3000 + 1234] = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
    EXPECT_TRUE(all_close(backend_for(kCPU).reduce(op, x, {1}, false),
                          backend_for(kGpu).reduce(op, x.to(kGpu), {1}, false), 2e-5));
  Tensor e = zeros({4, 0});
  EXPECT_TRUE(all_close(backend_for(kCPU).reduce(ReduceOp::Sum, e, {1}, false),
                        backend_for(kGpu).reduce(ReduceOp::Sum, e.to(kGpu), {1}, false), 0.0));
  EXPECT_TRUE(all_close(backend_for(kCPU).reduce(ReduceOp::Mean, e, {1}, false),
                        backend_for(kGpu).reduce(ReduceOp::Mean, e.to(kGpu), {1}, false), 0.0));
  EXPECT_THROW(backend_for(kGpu).reduce(ReduceOp::Max, e.to(kGpu), {1}, false), Error);
}

TEST(CudaReduce, MaxDimValuesAndFirstIndexOnTies) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8}) {
    for (Shape s : {Shape{500, 7}, Shape{64, 3000}, Shape{3, 9, 5}}) {
      // Few distinct values, so that ties are everywhere.
      Generator gen(83);
      Tensor x = randint(0, 4, s, {.dtype = DType::I64}, &gen).to(d);
      for (int64_t dim = 0; dim < int64_t(s.size()); ++dim) {
        SCOPED_TRACE(str(dtype_name(d), " ", str(s), " dim ", dim));
        auto [wv, wi] = backend_for(kCPU).max_dim(x, dim, dim == 0);
        auto [gv, gi] = backend_for(kGpu).max_dim(x.to(kGpu), dim, dim == 0);
        EXPECT_TRUE(all_equal(wv, gv));
        EXPECT_TRUE(all_equal(wi, gi));
      }
    }
  }
  Tensor x = sample({4, 2000}, DType::F32, 84);
  x.data<float>()[2000 + 777] = std::numeric_limits<float>::quiet_NaN();
  auto [wv, wi] = backend_for(kCPU).max_dim(x, 1, false);
  auto [gv, gi] = backend_for(kGpu).max_dim(x.to(kGpu), 1, false);
  EXPECT_TRUE(all_equal(wv, gv));
  EXPECT_TRUE(all_equal(wi, gi));
}

TEST(CudaSoftmax, ForwardAndBackwardMatchCpuFloat64) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (Shape s : {Shape{300, 10}, Shape{50, 1000}, Shape{8, 5000}, Shape{6, 7, 9}}) {
      for (int64_t dim : {int64_t(s.size()) - 1, int64_t(0)}) {
        for (bool log : {false, true}) {
          SCOPED_TRACE(
              str(dtype_name(d), " ", str(s), " dim ", dim, log ? " log_softmax" : " softmax"));
          Tensor x = sample(s, d, 91).mul_(3.0);
          Tensor x64 = x.to(DType::F64);
          Tensor want = backend_for(kCPU).softmax(x64, dim, log);
          Tensor got = backend_for(kGpu).softmax(x.to(kGpu), dim, log);
          EXPECT_EQ(got.dtype(), d);
          EXPECT_TRUE(all_close(want, got, forward_tol(d)));
          Tensor dy = sample(s, d, 92);
          Tensor y = want.to(d);  // the same (rounded) y on both sides
          Tensor gw =
              backend_for(kCPU).softmax_backward(dy.to(DType::F64), y.to(DType::F64), dim, log);
          Tensor gg = backend_for(kGpu).softmax_backward(dy.to(kGpu), y.to(kGpu), dim, log);
          EXPECT_TRUE(all_close(gw, gg, backward_tol(d)));
        }
      }
    }
  }
}

TEST(CudaSoftmax, MaskedEntriesGetZeroProbability) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = sample({4, 2000}, DType::F32, 93);
  float* p = x.data<float>();
  for (int64_t j = 0; j < 2000; j += 3) p[j] = -std::numeric_limits<float>::infinity();
  EXPECT_TRUE(all_close(backend_for(kCPU).softmax(x, 1, false),
                        backend_for(kGpu).softmax(x.to(kGpu), 1, false), 1e-5));
}

TEST(CudaLoss, NllLossWithIgnoredRowsMatchesCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t N = 3001, C = 10;
  Generator gen(101);
  Tensor target = randint(0, C, {N}, {.dtype = DType::I64}, &gen);
  int64_t* t = target.data<int64_t>();
  for (int64_t i = 0; i < N; i += 7) t[i] = -100;
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    Tensor logp = backend_for(kCPU).softmax(sample({N, C}, DType::F64, 102), 1, true).to(d);
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
      SCOPED_TRACE(str(dtype_name(d), " reduction ", int(r)));
      Tensor want = backend_for(kCPU).nll_loss(logp.to(DType::F64), target, r, -100, "nll_loss");
      Tensor got = backend_for(kGpu).nll_loss(logp.to(kGpu), target.to(kGpu), r, -100, "nll_loss");
      EXPECT_TRUE(all_close(want, got, r == Reduction::Sum ? sum_tol(d) : forward_tol(d)));
      Tensor grad = r == Reduction::None ? sample({N}, d, 103) : full({}, 1.7, {.dtype = d});
      Tensor gw = backend_for(kCPU).nll_loss_backward(grad.to(DType::F64), logp.to(DType::F64),
                                                      target, r, -100, "nll_loss");
      Tensor gg = backend_for(kGpu).nll_loss_backward(grad.to(kGpu), logp.to(kGpu), target.to(kGpu),
                                                      r, -100, "nll_loss");
      EXPECT_TRUE(all_close(gw, gg, forward_tol(d)));
    }
  }
  // Every row ignored: Mean is NaN on both.
  Tensor all_ignored = full({5}, -100, {.dtype = DType::I64});
  Tensor lp = zeros({5, 3});
  EXPECT_TRUE(
      std::isnan(backend_for(kGpu)
                     .nll_loss(lp.to(kGpu), all_ignored.to(kGpu), Reduction::Mean, -100, "nll_loss")
                     .item()));
  // The composite cross_entropy on the GPU agrees with the CPU.
  Tensor logits = sample({N, C}, DType::F32, 104);
  EXPECT_TRUE(all_close(cross_entropy(logits, target),
                        cross_entropy(logits.to(kGpu), target.to(kGpu)), 1e-5));
}

// The fused cross-entropy kernels (kernels/cuda/loss/cuda_cross_entropy.cu) against the CPU ones
// and the GPU composite: every reduction, label smoothing, ignored rows, strided and float64
// logits, more rows than a block has warps; a large Mean (4096 rows); bfloat16 logits of a
// GPT-2-sized vocabulary. (Targets out of range: CudaDeviceErrors in test_cuda_runtime.cpp.)
TEST(CudaFusedCrossEntropy, MatchesCpuAndComposite) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(17);
  const int64_t N = 300, C = 37;
  for (DType d : {DType::F32, DType::F64}) {
    Tensor logits = (randn({N, C}, {.dtype = DType::F64}, &gen) * 4.0).to(d);
    Tensor target = randint(0, C, {N}, {.dtype = DType::I64}, &gen);
    for (int64_t i = 0; i < N; i += 17) target.data<int64_t>()[i] = -100;
    for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (double ls : {0.0, 0.2})
        for (bool strided : {false, true}) {
          SCOPED_TRACE(
              str(dtype_name(d), " reduction ", int(r), " ls ", ls, strided ? " strided" : ""));
          auto run = [&](Device dev, bool fused) {
            const bool saved = fused_cross_entropy();
            set_fused_cross_entropy(fused);
            Tensor leaf = logits.to(dev).detach().requires_grad_(true);
            Tensor x = strided ? leaf.t().contiguous().t() : leaf;
            Tensor loss = cross_entropy(x, target.to(dev), r, ls);
            loss.backward(r == Reduction::None ? ones_like(loss) * 0.5 : ones_like(loss) * 2.0);
            set_fused_cross_entropy(saved);
            return std::make_pair(loss.detach().to(kCPU), leaf.grad().to(kCPU));
          };
          auto cpu = run(kCPU, true), gpu = run(kGpu, true), composite = run(kGpu, false);
          const double tol = d == DType::F32 ? 1e-5 : 1e-12;
          EXPECT_TRUE(all_close(cpu.first, gpu.first, tol));
          EXPECT_TRUE(all_close(cpu.second, gpu.second, tol));
          EXPECT_TRUE(all_close(composite.first, gpu.first, tol));
          EXPECT_TRUE(all_close(composite.second, gpu.second, tol));
        }
  }
  // Many rows: the rows' losses in parallel, then one block adds them.
  const bool saved = fused_cross_entropy();
  set_fused_cross_entropy(true);
  Tensor big = randn({4096, 300}, {}, &gen);
  Tensor bt = randint(0, 300, {4096}, {.dtype = DType::I64}, &gen);
  EXPECT_TRUE(all_close(cross_entropy(big, bt), cross_entropy(big.to(kGpu), bt.to(kGpu)), 1e-5));
  set_fused_cross_entropy(saved);
}

// GPT-2's vocabulary in bfloat16 under autocast (fused by default: 50304 >= 1024 classes): the GPU
// loss (float32) and gradient (bfloat16) against the CPU's fused kernels on the same values, and
// against the float64 composite. Online log-sum-exp over 50304 logits per row in float32.
TEST(CudaFusedCrossEntropy, GptVocabularyInBFloat16) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Generator gen(29);
  const int64_t N = 64, V = 50304;
  Tensor x = (randn({N, V}, {.dtype = DType::F32}, &gen) * 2.0).to(DType::BF16);
  Tensor target = randint(0, V, {N}, {.dtype = DType::I64}, &gen);
  target.data<int64_t>()[5] = -100;
  auto run = [&](Device dev) {
    Tensor leaf = x.to(dev).detach().requires_grad_(true);
    Tensor loss;
    {
      amp::Autocast ac(DType::BF16);
      loss = cross_entropy(leaf, target.to(dev));
    }
    loss.backward();
    return std::make_pair(loss.detach().to(kCPU), leaf.grad().to(kCPU));
  };
  auto cpu = run(kCPU), gpu = run(kGpu);
  EXPECT_EQ(gpu.first.dtype(), DType::F32);
  EXPECT_EQ(gpu.second.dtype(), DType::BF16);
  EXPECT_NEAR(gpu.first.item(), cpu.first.item(), 1e-5 * std::abs(cpu.first.item()));
  Tensor x64 = x.to(DType::F64).requires_grad_(true);
  Tensor want = nll_loss(log_softmax(x64, 1), target);
  want.backward();
  EXPECT_NEAR(gpu.first.item(), want.item(), 1e-5 * std::abs(want.item()));
  // each gradient within bfloat16's rounding (2^-8 relative) of the float64 one, plus float32 noise
  Tensor err = abs(gpu.second.to(DType::F64) - x64.grad()) - abs(x64.grad()) * (1.0 / 256);
  EXPECT_LT(max(err).item(), 1e-8);
}

TEST(CudaIndex, IndexSelectAndIndexAddMatchCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor index = from_vector<int64_t>({4, 0, 4, 2, 1, 4}, {6});
  for (DType d :
       {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8}) {
    Tensor x = sample({5, 6, 7}, d, 111);
    for (int64_t dim = 0; dim < 3; ++dim) {
      SCOPED_TRACE(str(dtype_name(d), " dim ", dim));
      Tensor xs = x.slice(dim, 0, 5);  // keeps every dim >= 5 so the indices are valid
      Tensor want = backend_for(kCPU).index_select(xs, dim, index);
      Tensor got = backend_for(kGpu).index_select(xs.to(kGpu), dim, index.to(kGpu));
      EXPECT_TRUE(all_equal(want, got));
      Tensor src = sample(want.shape(), d, 112);
      Tensor aw = backend_for(kCPU).index_add(xs.shape(), dim, index, src);
      Tensor ag = backend_for(kGpu).index_add(xs.shape(), dim, index.to(kGpu), src.to(kGpu));
      EXPECT_TRUE(all_close(aw, ag, is_floating(d) ? forward_tol(d) : 0.0));  // atomics: any order
    }
  }
}

TEST(CudaDropout, MaskAndOutputEqualTheCpuForTheSameSeed) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    Tensor x = sample({333, 517}, d, 121);
    for (double p : {0.0, 0.3, 0.9}) {
      SCOPED_TRACE(str(dtype_name(d), " p=", p));
      auto [wy, wm] = backend_for(kCPU).dropout(x, p, 777, 4096);
      auto [gy, gm] = backend_for(kGpu).dropout(x.to(kGpu), p, 777, 4096);
      EXPECT_TRUE(all_equal(wm, gm));
      EXPECT_TRUE(all_equal(wy, gy));
    }
    // A strided input is read in row-major order of its shape on both backends.
    auto [wy, wm] = backend_for(kCPU).dropout(x.t(), 0.5, 1, 0);
    auto [gy, gm] = backend_for(kGpu).dropout(x.to(kGpu).t(), 0.5, 1, 0);
    EXPECT_TRUE(all_equal(wy, gy)) << dtype_name(d);
  }
}

#ifdef LOOM_WITH_CUDA
template <typename F>
auto naive_and_fast(const F& f) {
  loom::cuda::set_use_naive_kernels(true);
  decltype(f()) naive;
  try {
    naive = f();
  } catch (...) {
    loom::cuda::set_use_naive_kernels(false);
    throw;
  }
  loom::cuda::set_use_naive_kernels(false);
  return std::make_pair(naive, f());
}

TEST(CudaReduce, FastKernelsAgreeWithNaive) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::BF16, DType::I32}) {
    for (const ReduceLayout& l : kLayouts) {
      Tensor g = sample(l.shape, d, 131, true).to(kGpu);
      if (l.transpose) g = g.t();
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
        SCOPED_TRACE(str(dtype_name(d), " ", l.path, " op ", int(op)));
        auto [n, f] =
            naive_and_fast([&] { return backend_for(kGpu).reduce(op, g, l.dims, false); });
        EXPECT_TRUE(all_close(n, f, op == ReduceOp::Sum ? sum_tol(d) : 0.0));
      }
    }
    for (Shape s : {Shape{1000, 9}, Shape{40, 5000}}) {
      Tensor g = randint(0, 5, s, {.dtype = DType::I64, .device = kGpu}).to(d);
      auto [n, f] = naive_and_fast([&] { return backend_for(kGpu).max_dim(g, 1, false); });
      EXPECT_TRUE(all_equal(n.first, f.first));
      EXPECT_TRUE(all_equal(n.second, f.second));
    }
  }
}

TEST(CudaSoftmax, FastKernelsAgreeWithNaive) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F16}) {
    for (Shape s : {Shape{1000, 33}, Shape{16, 4000}}) {
      for (bool log : {false, true}) {
        Tensor g = sample(s, d, 141).to(kGpu);
        auto [n, f] = naive_and_fast([&] { return backend_for(kGpu).softmax(g, 1, log); });
        EXPECT_TRUE(all_close(n, f, d == DType::F32 ? 1e-6 : 1e-3)) << dtype_name(d) << " " << log;
        Tensor dy = sample(s, d, 142).to(kGpu);
        auto [nb, fb] =
            naive_and_fast([&] { return backend_for(kGpu).softmax_backward(dy, f, 1, log); });
        EXPECT_TRUE(all_close(nb, fb, d == DType::F32 ? 1e-5 : 1e-2))
            << dtype_name(d) << " " << log;
      }
    }
  }
}
#endif

}  // namespace
}  // namespace loom::testing
