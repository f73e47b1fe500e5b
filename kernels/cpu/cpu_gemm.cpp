// CPU GEMM on OpenBLAS or Eigen (see cpu_gemm.h).
#include "kernels/cpu/cpu_gemm.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>

#include "core/error.h"
#include "core/parallel.h"

#ifdef LOOM_WITH_OPENBLAS
#include <cblas.h>
#endif

namespace loom::cpu {

// Note [CPU GEMM]
// On the 2-core development machine (AMD EPYC, AVX2) OpenBLAS 0.3.21 ran the mlp's products
// 1.3 to 1.8 times faster than Eigen 3.4's GEMM (about 150 against 100 GFLOP/s for 256 x 1024 x
// 1024), and the convolutions' per-image products 1.3 to 1.4 times faster. So when CMake finds
// OpenBLAS (cmake/LoomFindLibraries.cmake) it computes every CPU product, and Eigen's GEMM stays
// as the reference and the fallback (set_gemm_library, or LOOM_CPU_GEMM=eigen in the
// environment).
//
// Threads: loom owns the one OpenMP pool (core/parallel.h). OpenBLAS would start its own
// parallel work inside every call, and a call from inside one of loom's parallel regions (each
// thread convolving its share of the images) then spun in sched_yield at a tenth of the speed.
// So OpenBLAS is told to use one thread, once, and loom splits a product itself: outside a
// parallel region the output is cut into one block of columns (or rows, when there are more
// rows) per thread, and each thread multiplies its block; inside one, the calling thread does
// the whole product. In OpenBLAS's OpenMP build setting its thread count also sets OpenMP's, so
// the pool's size is put back straight after.

namespace {

GemmLibrary initial_library() {
  GemmLibrary lib = openblas_available() ? GemmLibrary::OpenBlas : GemmLibrary::Eigen;
  if (const char* env = std::getenv("LOOM_CPU_GEMM")) {
    if (std::strcmp(env, "eigen") == 0)
      lib = GemmLibrary::Eigen;
    else if (std::strcmp(env, "openblas") == 0 && openblas_available())
      lib = GemmLibrary::OpenBlas;
    else
      LOOM_FAIL("LOOM_CPU_GEMM=", env, ": expected eigen",
                openblas_available() ? " or openblas" : " (this loom was built without OpenBLAS)");
  }
  return lib;
}

std::atomic<GemmLibrary>& library() {
  static std::atomic<GemmLibrary> lib{initial_library()};
  return lib;
}

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

// A stored operand as Eigen sees it: rows x cols, row-major, leading dimension ld (at least the
// row length; a single row may have any).
template <typename T>
ConstMap<T> stored(const T* p, int64_t rows, int64_t cols, int64_t ld) {
  return ConstMap<T>(p, rows, cols, Eigen::OuterStride<>(std::max<int64_t>({ld, cols, 1})));
}

#ifdef LOOM_WITH_OPENBLAS
// Products smaller than this many multiply-adds run on one thread: splitting costs more than
// it saves.
constexpr int64_t kSplitWork = int64_t(1) << 18;

void single_threaded_openblas() {
  static std::once_flag once;
  std::call_once(once, [] {
    int pool = num_threads();
    openblas_set_num_threads(1);
    set_num_threads(pool);
  });
}

template <typename T>
void blas_call(const GemmArgs<T>& a) {
  const auto ta = a.trans_a ? CblasTrans : CblasNoTrans, tb = a.trans_b ? CblasTrans : CblasNoTrans;
  // Leading dimensions as BLAS wants them: at least the stored row length (a single stored row
  // may come with any stride).
  const int lda = int(std::max<int64_t>({a.lda, a.trans_a ? a.M : a.K, 1}));
  const int ldb = int(std::max<int64_t>({a.ldb, a.trans_b ? a.K : a.N, 1}));
  const int ldc = int(std::max<int64_t>({a.ldc, a.N, 1}));
  const T beta = a.accumulate ? T(1) : T(0);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, int(a.M), int(a.N), int(a.K), 1.0f, a.A, lda, a.B, ldb, beta,
                a.C, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, int(a.M), int(a.N), int(a.K), 1.0, a.A, lda, a.B, ldb, beta,
                a.C, ldc);
}

// The part of the product that writes columns [n0, n1) of C, or rows [m0, m1).
template <typename T>
GemmArgs<T> columns(GemmArgs<T> a, int64_t n0, int64_t n1) {
  a.B += a.trans_b ? n0 * a.ldb : n0;  // B stored (N, K) when transposed, else (K, N)
  a.C += n0;
  a.N = n1 - n0;
  return a;
}
template <typename T>
GemmArgs<T> rows(GemmArgs<T> a, int64_t m0, int64_t m1) {
  a.A += a.trans_a ? m0 : m0 * a.lda;  // A stored (K, M) when transposed, else (M, K)
  a.C += m0 * a.ldc;
  a.M = m1 - m0;
  return a;
}

template <typename T>
void gemm_openblas(const GemmArgs<T>& a) {
  single_threaded_openblas();
  const int threads = num_threads();
  if (threads == 1 || omp_in_parallel() || a.M * a.N * a.K < kSplitWork) {
    blas_call(a);
    return;
  }
  const bool by_columns = a.N >= a.M;
  const int64_t extent = by_columns ? a.N : a.M;
  const int64_t parts = std::min<int64_t>(threads, std::max<int64_t>(1, extent / 16));
  parallel_for(0, parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      // Block edges on multiples of 16 elements keep each thread's output rows aligned.
      int64_t lo = (extent * p / parts) / 16 * 16;
      int64_t hi = p + 1 == parts ? extent : (extent * (p + 1) / parts) / 16 * 16;
      if (lo < hi) blas_call(by_columns ? columns(a, lo, hi) : rows(a, lo, hi));
    }
  });
}

template <typename T>
bool blas_can_take(const GemmArgs<T>& a) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  return a.M <= kMax && a.N <= kMax && a.K <= kMax && a.lda <= kMax && a.ldb <= kMax &&
         a.ldc <= kMax;
}
#endif

}  // namespace

bool openblas_available() {
#ifdef LOOM_WITH_OPENBLAS
  return true;
#else
  return false;
#endif
}

GemmLibrary gemm_library() { return library().load(); }

void set_gemm_library(GemmLibrary lib) {
  LOOM_CHECK(
      lib != GemmLibrary::OpenBlas || openblas_available(),
      "set_gemm_library: this loom was built without OpenBLAS (install libopenblas-openmp-dev "
      "and reconfigure, or use GemmLibrary::Eigen)");
  library().store(lib);
}

const char* gemm_library_name(GemmLibrary lib) {
  return lib == GemmLibrary::OpenBlas ? "OpenBLAS" : "Eigen";
}

template <typename T>
void gemm_eigen(const GemmArgs<T>& a) {
  Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>> C(
      a.C, a.M, a.N, Eigen::OuterStride<>(std::max<int64_t>({a.ldc, a.N, 1})));
  auto A = stored(a.A, a.trans_a ? a.K : a.M, a.trans_a ? a.M : a.K, a.lda);
  auto B = stored(a.B, a.trans_b ? a.N : a.K, a.trans_b ? a.K : a.N, a.ldb);
  auto run = [&](const auto& opA, const auto& opB) {
    if (a.accumulate)
      C.noalias() += opA * opB;
    else
      C.noalias() = opA * opB;
  };
  if (a.trans_a && a.trans_b)
    run(A.transpose(), B.transpose());
  else if (a.trans_a)
    run(A.transpose(), B);
  else if (a.trans_b)
    run(A, B.transpose());
  else
    run(A, B);
}

template <typename T>
void gemm(const GemmArgs<T>& a) {
  if (a.M == 0 || a.N == 0) return;
  if (a.K == 0) {  // an empty sum: zeros, or C unchanged
    if (!a.accumulate)
      for (int64_t i = 0; i < a.M; ++i) std::fill(a.C + i * a.ldc, a.C + i * a.ldc + a.N, T(0));
    return;
  }
#ifdef LOOM_WITH_OPENBLAS
  if (gemm_library() == GemmLibrary::OpenBlas && blas_can_take(a)) {
    gemm_openblas(a);
    return;
  }
#endif
  gemm_eigen(a);
}

template void gemm<float>(const GemmArgs<float>&);
template void gemm<double>(const GemmArgs<double>&);
template void gemm_eigen<float>(const GemmArgs<float>&);
template void gemm_eigen<double>(const GemmArgs<double>&);

}  // namespace loom::cpu
