// kernels/cpu/cpu_gemm: the CPU matrix product on each library it can use (OpenBLAS when this
// build has it, and Eigen, the reference) against a float64 triple loop: both transposes, padded
// leading dimensions, accumulation, sizes that split unevenly over threads by rows and by
// columns, calls from inside a parallel region, empty sums; and that running OpenBLAS leaves the
// OpenMP pool's size alone.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_gemm.h"

using namespace loom;
using cpu::GemmArgs;
using cpu::GemmLibrary;

namespace {

// Puts the library back when a test ends, whatever it set.
class LibraryScope {
 public:
  explicit LibraryScope(GemmLibrary lib) : saved_(cpu::gemm_library()) {
    cpu::set_gemm_library(lib);
  }
  ~LibraryScope() { cpu::set_gemm_library(saved_); }

 private:
  GemmLibrary saved_;
};

std::vector<GemmLibrary> libraries() {
  std::vector<GemmLibrary> libs{GemmLibrary::Eigen};
  if (cpu::openblas_available()) libs.push_back(GemmLibrary::OpenBlas);
  return libs;
}

struct Case {
  int64_t M, N, K;
  bool ta, tb, accumulate;
  int64_t pad;  // extra elements at the end of every stored row
};

// Runs one case through cpu::gemm and checks every element against a float64 loop, within
// tol * (the sum of |a| |b| over the element's terms): K * eps of that sum bounds any order of
// summation, and tol sits well inside it (float eps 6e-8, K <= 300).
template <typename T>
void check(const Case& c, double tol, const std::string& what) {
  std::mt19937 rng(unsigned(c.M * 131 + c.N * 17 + c.K));
  std::uniform_real_distribution<double> u(-1, 1);
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  std::vector<T> A(size_t(a_rows * lda)), B(size_t(b_rows * ldb)), C(size_t(c.M * ldc));
  for (T& v : A) v = T(u(rng));
  for (T& v : B) v = T(u(rng));
  for (T& v : C) v = T(u(rng));
  const std::vector<T> C0 = C;
  GemmArgs<T> g;
  g.M = c.M, g.N = c.N, g.K = c.K;
  g.A = A.data(), g.lda = lda, g.trans_a = c.ta;
  g.B = B.data(), g.ldb = ldb, g.trans_b = c.tb;
  g.C = C.data(), g.ldc = ldc, g.accumulate = c.accumulate;
  cpu::gemm(g);
  auto a = [&](int64_t i, int64_t k) {
    return double(c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]);
  };
  auto b = [&](int64_t k, int64_t j) {
    return double(c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
  };
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double want = c.accumulate ? double(C0[size_t(i * ldc + j)]) : 0.0, scale = std::abs(want);
      for (int64_t k = 0; k < c.K; ++k) {
        want += a(i, k) * b(k, j);
        scale += std::abs(a(i, k) * b(k, j));
      }
      ASSERT_NEAR(double(C[size_t(i * ldc + j)]), want, tol * std::max(scale, 1.0))
          << what << " at (" << i << ", " << j << ")";
    }
  // The padding between rows of C is never written.
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = c.N; j < ldc; ++j)
      ASSERT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]) << what;
}

std::string name(const Case& c, GemmLibrary lib, const char* type) {
  return std::string(cpu::gemm_library_name(lib)) + " " + type + " M=" + std::to_string(c.M) +
         " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) + (c.ta ? " A^T" : "") +
         (c.tb ? " B^T" : "") + (c.accumulate ? " +=" : "") + " pad=" + std::to_string(c.pad);
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    std::vector<Case> v;
    // small and odd sizes, tall (split by rows) and wide (split by columns) shapes
    for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {200, 37, 64}, {37, 300, 50}, {130, 131, 129}})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) v.push_back({M, N, K, ta, tb, (M + N) % 2 == 0, (M % 3)});
    v.push_back({64, 96, 80, false, true, true, 5});
    v.push_back({96, 64, 80, true, false, false, 0});
    return v;
  }();
  return all;
}

TEST(CpuGemm, EachLibraryMatchesAFloat64Loop) {
  for (GemmLibrary lib : libraries()) {
    LibraryScope scope(lib);
    for (const Case& c : cases()) {
      check<float>(c, 1e-5, name(c, lib, "float"));
      check<double>(c, 1e-13, name(c, lib, "double"));
    }
  }
}

// The convolution calls the GEMM from every thread of the pool at once, each on its own images.
TEST(CpuGemm, CallsFromInsideAParallelRegion) {
  for (GemmLibrary lib : libraries()) {
    LibraryScope scope(lib);
    cpu::parallel_for(0, 8, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Case c{64, 49 + i, 72, false, i % 2 == 1, i % 3 == 0, 0};
        check<float>(c, 1e-5, name(c, lib, "float, inside a parallel region,"));
      }
    });
  }
}

TEST(CpuGemm, EmptySumsGiveZerosOrLeaveTheOutput) {
  for (GemmLibrary lib : libraries()) {
    LibraryScope scope(lib);
    std::vector<float> C(6, 3.0f);
    GemmArgs<float> g;
    g.M = 2, g.N = 3, g.K = 0, g.C = C.data(), g.ldc = 3;
    g.accumulate = true;
    cpu::gemm(g);
    EXPECT_EQ(C, std::vector<float>(6, 3.0f)) << cpu::gemm_library_name(lib);
    g.accumulate = false;
    cpu::gemm(g);
    EXPECT_EQ(C, std::vector<float>(6, 0.0f)) << cpu::gemm_library_name(lib);
  }
}

// OpenBLAS's OpenMP build sets OpenMP's thread count when told to run on one thread; loom puts
// the pool's size back (Note [CPU GEMM]).
TEST(CpuGemm, TheThreadPoolKeepsItsSize) {
  const int before = cpu::num_threads();
  for (GemmLibrary lib : libraries()) {
    LibraryScope scope(lib);
    check<float>({300, 300, 300, false, false, false, 0}, 1e-5, "a large product");
    EXPECT_EQ(cpu::num_threads(), before) << cpu::gemm_library_name(lib);
  }
}

TEST(CpuGemm, AskingForAMissingLibraryNamesIt) {
  if (cpu::openblas_available()) {
    LibraryScope scope(GemmLibrary::OpenBlas);
    EXPECT_EQ(cpu::gemm_library(), GemmLibrary::OpenBlas);
    return;
  }
  try {
    cpu::set_gemm_library(GemmLibrary::OpenBlas);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without OpenBLAS"), std::string::npos) << e.what();
  }
}

}  // namespace
