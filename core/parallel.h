// parallel_for: split [begin, end) into one contiguous chunk per thread of the one CPU thread
// pool (OpenMP's, which Eigen's matrix products share), or run inline when the range is small
// or we are already inside a parallel region.
// Leaves out: work stealing and nested parallelism (kernels are flat loops).
#pragma once

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace loom::cpu {

// Below this many elements of elementwise work a loop runs on one thread.
constexpr int64_t kGrainSize = 32768;

int num_threads();
void set_num_threads(int n);

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  int64_t n = end - begin;
  if (n <= 0) return;
#ifdef _OPENMP
  if (n > grain && !omp_in_parallel() && omp_get_max_threads() > 1) {
    int64_t max_chunks = (n + grain - 1) / std::max<int64_t>(grain, 1);
    int threads = int(std::min<int64_t>(omp_get_max_threads(), max_chunks));
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      int64_t chunk = (n + nt - 1) / nt;
      int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
      if (b < e) f(b, e);
    }
    return;
  }
#endif
  f(begin, end);
}

}  // namespace loom::cpu
