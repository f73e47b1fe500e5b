// CUDA against CPU for the elementwise kernels in every dtype (unary, binary, scalar, in place,
// where), copies in every direction and dtype pair, fills, arange and random draws; and the fast
// elementwise kernels against their naive reference at sizes and layouts that hit every path.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/backend.h"
#include "support/cuda_test_util.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/host_allocator.h"
#include "kernels/cuda/launch.h"
#endif

namespace loom::testing {
namespace {

const Device kGpu = cuda_device(0);
const DType kAllNumeric[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                             DType::I64, DType::I32, DType::U8};

// Values in a dtype: floats from randn (or uniform in [0.5, 2) when positive), integers in [0, 8).
Tensor sample(const Shape& s, DType d, uint64_t seed, bool positive = false) {
  Generator gen(seed);
  if (!is_floating(d)) return randint(0, 8, s, {.dtype = DType::I64}, &gen).to(d);
  Tensor t = positive ? uniform(s, 0.5, 2.0, {.dtype = DType::F64}, &gen)
                      : randn(s, {.dtype = DType::F64}, &gen);
  return t.to(d);
}

double tol_for(DType d) { return is_floating(d) ? forward_tol(d) : 0.0; }

bool positive_only(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Rsqrt ||
         op == UnaryOp::Reciprocal;
}

bool floating_only(UnaryOp op) {
  switch (op) {
#define LOOM_CASE(n) \
  case UnaryOp::n:   \
    return n##Op::floating_only;
    LOOM_UNARY_OPS(LOOM_CASE)
#undef LOOM_CASE
  }
  return true;
}

bool floating_only(BinaryOp op) {
  switch (op) {
#define LOOM_CASE(n) \
  case BinaryOp::n:  \
    return n##Op::floating_only;
    LOOM_BINARY_OPS(LOOM_CASE)
#undef LOOM_CASE
  }
  return true;
}

#define LOOM_UNARY_ENTRY(n) UnaryOp::n,
#define LOOM_BINARY_ENTRY(n) BinaryOp::n,
const UnaryOp kUnaryOps[] = {LOOM_UNARY_OPS(LOOM_UNARY_ENTRY)};
const BinaryOp kBinaryOps[] = {LOOM_BINARY_OPS(LOOM_BINARY_ENTRY)};
#undef LOOM_UNARY_ENTRY
#undef LOOM_BINARY_ENTRY

TEST(CudaElementwise, UnaryOpsMatchCpuInEveryDtype) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (UnaryOp op : kUnaryOps) {
    for (DType d : kAllNumeric) {
      if (floating_only(op) && !is_floating(d)) continue;
      SCOPED_TRACE(std::string(op_name(op)) + " " + dtype_name(d));
      Tensor x = sample({37, 29}, d, 11, positive_only(op)).t();  // strided input
      Tensor want = backend_for(kCPU).unary(op, x);
      Tensor got = backend_for(kGpu).unary(op, x.to(kGpu));
      EXPECT_EQ(got.dtype(), d);
      EXPECT_TRUE(all_close(want, got, tol_for(d)));
    }
  }
}

TEST(CudaElementwise, BinaryOpsMatchCpuInEveryDtypeWithBroadcasting) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (BinaryOp op : kBinaryOps) {
    for (DType d : kAllNumeric) {
      if (floating_only(op) && !is_floating(d)) continue;
      if (op == BinaryOp::Div && !is_floating(d)) continue;  // an error on both backends
      SCOPED_TRACE(std::string(op_name(op)) + " " + dtype_name(d));
      bool pos = op == BinaryOp::Pow || op == BinaryOp::Div;
      Tensor a = sample({5, 1, 67}, d, 21, pos), b = sample({9, 67}, d, 22, pos);
      Tensor want = backend_for(kCPU).binary(op, a, b);
      Tensor got = backend_for(kGpu).binary(op, a.to(kGpu), b.to(kGpu));
      EXPECT_EQ(got.dtype(), want.dtype());
      double tol = want.is_floating_point() ? tol_for(d) : 0.0;
      if (op == BinaryOp::Pow && is_floating(d))
        tol *= 10;  // pow amplifies the rounding of its inputs
      EXPECT_TRUE(all_close(want, got, tol));
    }
  }
}

TEST(CudaElementwise, ScalarAndInPlaceFormsMatchCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32}) {
    SCOPED_TRACE(dtype_name(d));
    Tensor a = sample({33, 17}, d, 31, true);
    for (bool first : {false, true}) {
      for (BinaryOp op : {BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Lt}) {
        Tensor want = backend_for(kCPU).binary_scalar(op, a, 1.5, first);
        Tensor got = backend_for(kGpu).binary_scalar(op, a.to(kGpu), 1.5, first);
        EXPECT_TRUE(all_close(want, got, tol_for(d))) << op_name(op) << " scalar_first=" << first;
      }
    }
    // In place on a transposed (strided) view, with a broadcast operand.
    Tensor c = sample({17, 33}, d, 32), g = c.to(kGpu);
    Tensor b = sample({17, 1}, d, 33, true);
    backend_for(kCPU).binary_(BinaryOp::Add, c.t(), b.t());
    backend_for(kGpu).binary_(BinaryOp::Add, g.t(), b.t().to(kGpu));
    EXPECT_TRUE(all_close(c, g, tol_for(d)));
  }
}

TEST(CudaElementwise, WhereBroadcastsAllThreeOperands) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::BF16, DType::I64, DType::Bool}) {
    Tensor cond = gt(sample({4, 1, 50}, DType::F32, 41), 0.0);
    Tensor a = sample({3, 1}, d == DType::Bool ? DType::U8 : d, 42).to(d);
    Tensor b = sample({50}, d == DType::Bool ? DType::U8 : d, 43).to(d);
    Tensor want = backend_for(kCPU).where(cond, a, b);
    Tensor got = backend_for(kGpu).where(cond.to(kGpu), a.to(kGpu), b.to(kGpu));
    EXPECT_TRUE(all_equal(want, got)) << dtype_name(d);
  }
}

#ifdef LOOM_WITH_CUDA
// Runs f with the naive kernels, then with the fast ones, and returns both results.
template <typename F>
std::pair<Tensor, Tensor> naive_and_fast(const F& f) {
  loom::cuda::set_use_naive_kernels(true);
  Tensor naive;
  try {
    naive = f();
  } catch (...) {
    loom::cuda::set_use_naive_kernels(false);
    throw;
  }
  loom::cuda::set_use_naive_kernels(false);
  return {naive, f()};
}

TEST(CudaElementwise, FastKernelsAgreeWithNaiveOnEveryPath) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // Sizes around the vector width and odd tails; offsets that break 16-byte alignment; a
  // transposed operand (strided path); broadcasting; a 0-d tensor; > 16 dims collapsed.
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::U8}) {
    for (int64_t n : {1, 3, 8, 17, 1000003}) {
      SCOPED_TRACE(str(dtype_name(d), " n=", n));
      Tensor a = sample({n + 1}, d, 51, true).to(kGpu), b = sample({n + 1}, d, 52, true).to(kGpu);
      auto [n1, f1] = naive_and_fast(
          [&] { return add(a.slice(0, 0, n), b.slice(0, 1, n + 1)); });  // misaligned b
      EXPECT_TRUE(all_equal(n1, f1));
      auto [n2, f2] =
          naive_and_fast([&] { return mul(a.slice(0, 1, n + 1), b.slice(0, 1, n + 1)); });
      EXPECT_TRUE(all_equal(n2, f2));
      auto [n3, f3] = naive_and_fast([&] { return maximum(a, b); });  // aligned, vectorized
      EXPECT_TRUE(all_equal(n3, f3));
    }
    Tensor m = sample({301, 257}, d, 53).to(kGpu), row = sample({257}, d, 54).to(kGpu);
    auto [n4, f4] =
        naive_and_fast([&] { return add(m.t(), row.unsqueeze(1)); });  // strided + broadcast
    EXPECT_TRUE(all_equal(n4, f4)) << dtype_name(d);
    auto [n5, f5] = naive_and_fast([&] { return sub(m, row); });
    EXPECT_TRUE(all_equal(n5, f5)) << dtype_name(d);
    Tensor s = sample({}, d, 55).to(kGpu);
    auto [n6, f6] = naive_and_fast([&] { return mul(m, s); });
    EXPECT_TRUE(all_equal(n6, f6)) << dtype_name(d);
  }
  Tensor big = sample({2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3, 2, 2}, DType::F32, 56).to(kGpu);
  auto [n7, f7] = naive_and_fast([&] { return exp(big.transpose(0, 15)); });
  EXPECT_TRUE(all_equal(n7, f7));
  EXPECT_TRUE(all_close(exp(big.transpose(0, 15).to(kCPU)), f7, 1e-6));
}
#endif

// ---------------------------------------------------------------- copies

TEST(CudaCopy, EveryDtypePairConvertsLikeTheCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const DType all[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                       DType::I64, DType::I32, DType::U8,  DType::Bool};
  std::vector<double> v{0, 1, 2.5, 7.75, 100, 3.25, 0.5, 255, 1e-3, 42};
  Tensor base = from_vector<double>(v, {2, 5});
  for (DType s : all) {
    Tensor src = base.to(s);
    Tensor gsrc = src.to(kGpu);
    for (DType d : all) {
      SCOPED_TRACE(str(dtype_name(s), " -> ", dtype_name(d)));
      Tensor want = src.to(d);
      Tensor got = gsrc.to(d);  // converted on the GPU
      EXPECT_TRUE(got.device().is_cuda());
      EXPECT_TRUE(all_equal(want, got));
      EXPECT_TRUE(all_equal(want, gsrc.t().to(d).t()));  // strided source
    }
  }
}

// Note [Half conversions] in core/half.h: kernels convert with the GPU's cvt instructions, the host
// with integer arithmetic. Every one of the 65536 half values must widen to the same float, and
// floats at, between and around the half values (ties to even, the overflow edge at 65520,
// subnormals) must round to the same half, bit for bit; NaNs only need to stay NaNs.
TEST(CudaCopy, HalfConversionsMatchTheHostBitForBit) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor halves = empty({65536}, {.dtype = DType::F16});
  for (uint32_t b = 0; b < 65536; ++b) halves.data<Half>()[b].bits = uint16_t(b);
  Tensor want_f = halves.to(DType::F32), got_f = halves.to(kGpu).to(DType::F32).to(kCPU);
  for (int64_t i = 0; i < 65536; ++i) {
    float w = want_f.data<float>()[i], g = got_f.data<float>()[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "half bits " << i;
      continue;
    }
    uint32_t wb, gb;
    std::memcpy(&wb, &w, 4);
    std::memcpy(&gb, &g, 4);
    ASSERT_EQ(wb, gb) << "half bits " << i << " widen to " << w << " on the host, " << g
                      << " on the GPU";
  }
  // Floats to round: each finite half value, the midpoints to its neighbour (ties), a nudge either
  // side of both, then values past the largest half and random floats over a wide range.
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    float x = float(Half::from_bits(uint16_t(b))), next = float(Half::from_bits(uint16_t(b + 1)));
    float mid = x + (next - x) / 2;
    for (float f : {x, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f),
                    std::nextafter(x, 1e30f)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  for (float f : {65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e9f, 3e38f}) {
    v.push_back(f);
    v.push_back(-f);
  }
  Generator gen(7);
  Tensor r = randn({20000}, {}, &gen) * 1000.0;
  for (int64_t i = 0; i < r.numel(); ++i) v.push_back(r.data<float>()[i]);
  Tensor floats = from_vector<float>(v, {int64_t(v.size())});
  Tensor want_h = floats.to(DType::F16), got_h = floats.to(kGpu).to(DType::F16).to(kCPU);
  for (int64_t i = 0; i < floats.numel(); ++i)
    ASSERT_EQ(want_h.data<Half>()[i].bits, got_h.data<Half>()[i].bits)
        << "float " << v[size_t(i)] << " rounds differently on the GPU";
}

TEST(CudaCopy, StridedBroadcastAndCrossDtypeDestinations) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = sample({64, 48}, DType::F32, 61);
  Tensor g = x.to(kGpu);
  // device -> device into a transposed destination, and a broadcast source
  Tensor dst = empty({48, 64}, {.device = kGpu});
  dst.t().copy_(g);
  EXPECT_TRUE(all_equal(x.t().contiguous(), dst));
  Tensor row = sample({48}, DType::F32, 62);
  Tensor b = empty({64, 48}, {.dtype = DType::F16, .device = kGpu});
  b.copy_(row.to(kGpu));
  EXPECT_TRUE(all_equal(row.expand({64, 48}).to(DType::F16), b));
  // host -> device: non-contiguous, converting and broadcasting sources (staged)
  Tensor h1 = empty({48, 64}, {.device = kGpu});
  h1.copy_(x.t());
  EXPECT_TRUE(all_equal(x.t().contiguous(), h1));
  Tensor h2 = empty({64, 48}, {.dtype = DType::BF16, .device = kGpu});
  h2.copy_(x.to(DType::F64));
  EXPECT_TRUE(all_equal(x.to(DType::BF16), h2));
  Tensor h3 = empty({64, 48}, {.device = kGpu});
  h3.copy_(row);
  EXPECT_TRUE(all_equal(row.expand({64, 48}).contiguous(), h3));
  // device -> host into a strided, converting destination
  Tensor host = zeros({48, 64}, {.dtype = DType::F64});
  host.t().copy_(g);
  EXPECT_TRUE(all_equal(x.t().to(DType::F64), host));
  // step slices both ways
  Tensor s = empty({32, 48}, {.device = kGpu});
  s.copy_(x.slice(0, 1, 64, 2));
  EXPECT_TRUE(all_equal(x.slice(0, 1, 64, 2).contiguous(), s));
}

#ifdef LOOM_WITH_CUDA
TEST(CudaCopy, PinnedAndPageableHostMemory) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 1 << 22;
  Tensor pageable = sample({n}, DType::F32, 71);
  EXPECT_FALSE(loom::cuda::is_pinned(pageable));
  Tensor pinned = loom::cuda::pinned_empty({n}, DType::F32);
  EXPECT_TRUE(loom::cuda::is_pinned(pinned));
  std::memcpy(pinned.data_ptr(), pageable.data_ptr(), size_t(n) * 4);
  Tensor a = empty({n}, {.device = kGpu}), b = empty({n}, {.device = kGpu});
  a.copy_(pageable);  // synchronous: the host buffer may change right after
  b.copy_(pinned);    // asynchronous
  pinned = Tensor();  // freed while the copy may still run: its block must not be reused early
  Tensor other = loom::cuda::pinned_empty({n}, DType::F32);
  std::memset(other.data_ptr(), 0xff, size_t(n) * 4);
  float* pp = pageable.data<float>();
  std::vector<float> keep(pp, pp + n);
  std::memset(pp, 0, size_t(n) * 4);
  Tensor want = from_vector<float>(keep, {n});
  EXPECT_TRUE(all_equal(want, a));
  EXPECT_TRUE(all_equal(want, b));
  // device -> pinned host
  Tensor back = loom::cuda::pinned_empty({n}, DType::F32);
  back.copy_(b);
  EXPECT_TRUE(all_equal(want, back));
}
#endif

TEST(CudaFill, FillsEveryDtypeAndLayout) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64, DType::I32,
                  DType::U8, DType::Bool}) {
    for (double v : {0.0, 3.0, -0.0}) {
      Tensor g = full({7, 9}, v, {.dtype = d, .device = kGpu});
      EXPECT_TRUE(all_equal(full({7, 9}, v, {.dtype = d}), g)) << dtype_name(d) << " " << v;
    }
    Tensor g = zeros({6, 8}, {.dtype = d, .device = kGpu});
    g.slice(1, 1, 8, 2).fill_(1.0);  // strided fill
    Tensor c = zeros({6, 8}, {.dtype = d});
    c.slice(1, 1, 8, 2).fill_(1.0);
    EXPECT_TRUE(all_equal(c, g)) << dtype_name(d);
  }
}

TEST(CudaFill, ArangeMatchesCpu) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(
      all_equal(arange(0, 100003), arange(0, 100003, 1, {.dtype = DType::I64, .device = kGpu})));
  EXPECT_TRUE(all_equal(arange(-5, 7, 0.25, {.dtype = DType::F32}),
                        arange(-5, 7, 0.25, {.dtype = DType::F32, .device = kGpu})));
  EXPECT_TRUE(all_equal(arange(3, 90, 3, {.dtype = DType::I32}),
                        arange(3, 90, 3, {.dtype = DType::I32, .device = kGpu})));
}

TEST(CudaRandom, SameSeedGivesTheCpuNumbers) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Shape s{1000, 1003};
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    SCOPED_TRACE(dtype_name(d));
    Generator c1(1234), g1(1234);
    EXPECT_TRUE(all_equal(rand(s, {.dtype = d}, &c1), rand(s, {.dtype = d, .device = kGpu}, &g1)));
    EXPECT_TRUE(all_equal(uniform(s, -0.3, 1.7, {.dtype = d}, &c1),
                          uniform(s, -0.3, 1.7, {.dtype = d, .device = kGpu}, &g1)));
    // Normals pass through log and cos, whose last bit may differ between libm and CUDA.
    EXPECT_TRUE(all_close(randn(s, {.dtype = d}, &c1), randn(s, {.dtype = d, .device = kGpu}, &g1),
                          d == DType::F64   ? 1e-14
                          : d == DType::F32 ? 1e-7
                                            : 1e-2));
  }
  Generator c2(99), g2(99);
  EXPECT_TRUE(all_equal(randint(-7, 1000, s, {.dtype = DType::I64}, &c2),
                        randint(-7, 1000, s, {.dtype = DType::I64, .device = kGpu}, &g2)));
  // Consecutive draws continue the same stream on both devices.
  Generator c3(5), g3(5);
  rand({10}, {}, &c3);
  rand({10}, {.device = kGpu}, &g3);
  EXPECT_TRUE(all_equal(rand({77}, {}, &c3), rand({77}, {.device = kGpu}, &g3)));
}

}  // namespace
}  // namespace loom::testing
