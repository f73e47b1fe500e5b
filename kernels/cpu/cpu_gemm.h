// The CPU backend's one matrix product: C = op(A) op(B) (+ C) on row-major float or double
// matrices given by pointer and leading dimension. Matrix products (cpu_linalg.cpp) and
// convolutions (cpu_conv.cpp) call it. It runs on OpenBLAS when loom was built with it (the
// faster of the two on the development machines) and on Eigen's GEMM otherwise; Eigen's stays
// as the reference the tests compare OpenBLAS against (Note [CPU GEMM]).
// Leaves out: half precision (callers widen to float32), batched and strided-batch products.
#pragma once

#include <cstdint>

namespace loom::cpu {

// Row-major operands: op(A) is (M, K), op(B) is (K, N), C is (M, N). A is stored (M, K) with
// leading dimension lda, or (K, M) when trans_a; the same for B. accumulate adds to C instead of
// overwriting it.
template <typename T>
struct GemmArgs {
  int64_t M = 0, N = 0, K = 0;
  const T* A = nullptr;
  int64_t lda = 0;
  bool trans_a = false;
  const T* B = nullptr;
  int64_t ldb = 0;
  bool trans_b = false;
  T* C = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};

// Which library computes CPU matrix products. OpenBLAS is the default when loom was built with
// it; Eigen always exists.
enum class GemmLibrary { Eigen, OpenBlas };
bool openblas_available();
GemmLibrary gemm_library();
// Fails, naming the library, when OpenBLAS is asked for and loom was built without it.
void set_gemm_library(GemmLibrary lib);
const char* gemm_library_name(GemmLibrary lib);

// Inside a parallel region (a thread's share of a convolution) the product runs on the calling
// thread; otherwise on every thread of the pool.
template <typename T>
void gemm(const GemmArgs<T>& a);

// Eigen's GEMM, whatever gemm_library() says: the reference.
template <typename T>
void gemm_eigen(const GemmArgs<T>& a);

}  // namespace loom::cpu
