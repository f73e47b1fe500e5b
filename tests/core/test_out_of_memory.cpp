// loom::OutOfMemoryError (core/out_of_memory.h): the CPU allocator's memory limit simulates the
// failure (requests over it throw with the live and peak bytes, below it work, the limit resets),
// LOOM_CPU_MEMORY_LIMIT's syntax, byte formatting, and the CUDA message built from given numbers.
// Leaves out: a real cudaMalloc failure (CudaAllocator.OutOfMemoryErrorNamesTheNumbers in
// test_cuda_runtime.cpp) and a program's exit status
// (tests/examples/test_train_gpt_out_of_memory.cpp).
#include <gtest/gtest.h>

#include <string>

#include "autograd/ops/ops.h"
#include "core/allocator.h"
#include "core/out_of_memory.h"

using namespace loom;

namespace {

// Sets the CPU memory limit for one scope and puts the previous one back.
struct CpuLimit {
  size_t before = cpu_memory_limit();
  explicit CpuLimit(size_t bytes) { set_cpu_memory_limit(bytes); }
  ~CpuLimit() { set_cpu_memory_limit(before); }
};

void expect_advice(const std::string& m) {
  for (const char* flag :
       {"--batch-size", "--grad-accum K", "--amp bf16", "--activation-checkpointing", "--zero 2"})
    EXPECT_NE(m.find(flag), std::string::npos) << "no " << flag << " in: " << m;
}

}  // namespace

TEST(CpuMemoryLimit, AllocationOverTheLimitThrowsNamingTheNumbers) {
  Tensor keep = empty({1 << 18});  // 1 MiB live while the limit holds
  const size_t live = cpu_alloc_stats().live_bytes;
  CpuLimit limit(live + (size_t(2) << 20));
  Tensor fits = empty({1 << 18});  // 1 MiB more: under the limit
  reset_cpu_peak();
  const CpuAllocStats at = cpu_alloc_stats();
  try {
    Tensor t = empty({3 << 18});  // 3 MiB: over it
    FAIL() << "allocated 3 MiB over a limit of " << cpu_memory_limit();
  } catch (const OutOfMemoryError& e) {
    const OutOfMemoryNumbers& n = e.numbers();
    EXPECT_EQ(n.device, "cpu");
    EXPECT_EQ(n.requested, size_t(3) << 20);
    EXPECT_EQ(n.allocated, at.live_bytes);
    EXPECT_EQ(n.peak_allocated, at.peak_live_bytes);
    EXPECT_EQ(n.limit, live + (size_t(2) << 20));
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("CPU out of memory: tried to allocate 3.00 MiB; the CPU allocator holds " +
                          format_bytes(at.live_bytes) + " live, peak " +
                          format_bytes(at.peak_live_bytes) +
                          " in this run; the CPU memory limit is " + format_bytes(n.limit),
                      0),
              0u)
        << m;
    expect_advice(m);
  }
  EXPECT_EQ(cpu_alloc_stats().live_bytes, at.live_bytes) << "the failed request left memory behind";
  EXPECT_EQ(ones({16}).sum().item(), 16.0);  // small requests still work under the limit
}

TEST(CpuMemoryLimit, ZeroMeansNoLimitAndTheLimitResets) {
  const size_t before = cpu_memory_limit();
  {
    CpuLimit limit(cpu_alloc_stats().live_bytes + 4096);
    EXPECT_THROW(empty({1 << 18}), OutOfMemoryError);
    set_cpu_memory_limit(0);
    EXPECT_EQ(empty({1 << 18}).numel(), 1 << 18);
  }
  EXPECT_EQ(cpu_memory_limit(), before);
  EXPECT_EQ(empty({1 << 18}).numel(), 1 << 18);
}

TEST(CpuMemoryLimit, OutOfMemoryIsALoomError) {
  CpuLimit limit(1024);
  try {
    empty({1 << 20});
    FAIL() << "allocated 4 MiB over a limit of 1 KiB";
  } catch (const Error& e) {  // what run_main catches
    EXPECT_NE(std::string(e.what()).find("tried to allocate 4.00 MiB"), std::string::npos)
        << e.what();
  }
}

TEST(CpuMemoryLimit, ParsesBytesAndBinarySuffixes) {
  EXPECT_EQ(parse_memory_size("0"), 0u);
  EXPECT_EQ(parse_memory_size("1048576"), size_t(1) << 20);
  EXPECT_EQ(parse_memory_size("64K"), size_t(64) << 10);
  EXPECT_EQ(parse_memory_size("512M"), size_t(512) << 20);
  EXPECT_EQ(parse_memory_size("2g"), size_t(2) << 30);
  for (const char* bad :
       {"", "M", "1.5G", "-1", "12X", "1 G", "99999999999999999999", "17179869184G"}) {
    try {
      parse_memory_size(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("LOOM_CPU_MEMORY_LIMIT='" + std::string(bad) + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("K, M or G"), std::string::npos) << m;
    }
  }
}

TEST(OutOfMemoryMessage, BytesInTheLargestUnitWithThreeDigits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(size_t(3) << 20), "3.00 MiB");
  EXPECT_EQ(format_bytes(size_t(512) << 20), "512 MiB");
  EXPECT_EQ(format_bytes(size_t(10.3 * double(size_t(1) << 30))), "10.3 GiB");
  EXPECT_EQ(format_bytes(size_t(4) << 40), "4.00 TiB");
}

TEST(OutOfMemoryMessage, CudaNamesTheAllocatorsNumbersAndTheDevice) {
  OutOfMemoryNumbers n;
  n.device = "cuda:1";
  n.requested = size_t(2) << 30;
  n.allocated = size_t(10) << 30;
  n.reserved = size_t(12) << 30;
  n.largest_free_block = size_t(512) << 20;
  n.peak_allocated = size_t(11) << 30;
  n.device_free = size_t(1) << 30;
  n.device_total = size_t(140) << 30;
  n.cause = "cudaMalloc of a 2.00 GiB segment: cudaErrorMemoryAllocation, after emptying the cache";
  OutOfMemoryError e(n);
  EXPECT_EQ(std::string(e.what()),
            "CUDA out of memory on cuda:1: tried to allocate 2.00 GiB; the caching allocator holds "
            "10.0 GiB allocated, 12.0 GiB reserved (largest free block 512 MiB), peak 11.0 GiB in "
            "this run; the device has 1.00 GiB free of 140 GiB (cudaMalloc of a 2.00 GiB "
            "segment: cudaErrorMemoryAllocation, after emptying the cache). To fit: a smaller "
            "--batch-size, --grad-accum K (the same batch as K micro-batches, 1/K of the "
            "activations), --amp bf16, --activation-checkpointing (train_gpt), --zero 2 (under "
            "loomrun: optimizer state and gradients sharded over the processes)");
  EXPECT_EQ(e.numbers().largest_free_block, size_t(512) << 20);

  n.device_free = n.device_total = 0;  // not asked during a graph capture
  EXPECT_NE(out_of_memory_message(n).find("the device has ? free"), std::string::npos)
      << out_of_memory_message(n);
}
