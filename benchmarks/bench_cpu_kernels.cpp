// CPU microbenchmarks (Google Benchmark): loom's matmul against Eigen's GEMM called directly,
// elementwise add against memcpy of the same bytes (the bandwidth ceiling), and conv2d at the
// cnn workload's layer shapes.
//   ./build/benchmarks/bench_cpu_kernels --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <cstdio>
#include <cstring>

#include "autograd/ops/ops.h"

using namespace loom;

namespace {

void BM_MatmulLoom(benchmark::State& st) {
  int64_t n = st.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : st) benchmark::DoNotOptimize(mm(a, b).data_ptr());
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_MatmulEigen(benchmark::State& st) {
  int64_t n = st.range(0);
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  M a = M::Random(n, n), b = M::Random(n, n), c(n, n);
  for (auto _ : st) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_AddLoom(benchmark::State& st) {
  int64_t n = st.range(0);
  Tensor a = randn({n}), b = randn({n});
  for (auto _ : st) benchmark::DoNotOptimize(add(a, b).data_ptr());
  st.SetBytesProcessed(st.iterations() * 3 * n * 4);  // read a, b; write out
}

void BM_Memcpy(benchmark::State& st) {
  int64_t n = st.range(0);
  // The same traffic as add: 3 streams of n floats (copy 1.5n floats: read 1.5n, write 1.5n).
  std::vector<float> src(size_t(n * 3 / 2), 1.0f), dst(size_t(n * 3 / 2));
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), src.size() * 4);
    benchmark::DoNotOptimize(dst.data());
  }
  st.SetBytesProcessed(st.iterations() * 3 * n * 4);
}

void BM_Conv2dForward(benchmark::State& st) {
  // The cnn workload's second layer: (N, 32, 28, 28) * (64, 32, 3, 3), padding 1.
  int64_t n = st.range(0);
  Tensor x = randn({n, 32, 28, 28}), w = randn({64, 32, 3, 3});
  Conv2dParams p;
  p.padding = {1, 1};
  for (auto _ : st) benchmark::DoNotOptimize(conv2d(x, w, Tensor(), p).data_ptr());
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * 64 * 28 * 28 * 32 * 9,
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

}  // namespace

BENCHMARK(BM_MatmulLoom)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatmulEigen)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AddLoom)->Arg(1 << 16)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Memcpy)->Arg(1 << 16)->Arg(1 << 24)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Conv2dForward)->Arg(16)->Unit(benchmark::kMillisecond);

// BENCHMARK_MAIN, but an error in a benchmark ends the program with one line and exit code 1.
int main(int argc, char** argv) {
  try {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_kernels: error: %s\n", e.what());
    return 1;
  }
}
