// The CUDA runtime: streams and events, the caching allocator (reuse, splitting, per-stream pools,
// record_stream, statistics, the out-of-memory message), the pinned host allocator, CUDA graph
// capture and replay (and the error on a host sync inside a capture), errors found by kernels,
// and the environment report.
#include <atomic>
#include <cstring>
#include <thread>

#include "support/cuda_test_util.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/allocator.h"
#include "core/cuda/device_info.h"
#include "core/cuda/graph.h"
#include "core/cuda/host_allocator.h"
#include "core/cuda/stream.h"
#include "core/out_of_memory.h"

namespace loom::testing {
namespace {

const Device kGpu = cuda_device(0);

// A stream that does nothing until release(): work queued behind it stays pending, so tests of
// event-based reuse do not depend on timing.
class BlockedStream {
 public:
  BlockedStream() {
    cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking);
    cudaLaunchHostFunc(s_, &BlockedStream::wait, &go_);
  }
  ~BlockedStream() {
    release();
    cudaStreamSynchronize(s_);
    cudaStreamDestroy(s_);
  }
  void release() { go_.store(true); }
  cudaStream_t get() const { return s_; }

 private:
  static void wait(void* flag) {
    while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
  }
  cudaStream_t s_ = nullptr;
  std::atomic<bool> go_{false};
};

// Makes `s` the current stream of cuda:0 for the scope.
struct StreamScope {
  explicit StreamScope(cudaStream_t s) : prev(cuda::current_stream(0)) {
    cuda::set_current_stream(0, s);
  }
  ~StreamScope() { cuda::set_current_stream(0, prev); }
  cudaStream_t prev;
};

// A new stream made current for the scope: its pools start empty, so which block an allocation
// gets does not depend on what earlier tests left in the cache. Never destroyed, so that no later
// stream gets the same handle (and with it this one's cached blocks).
struct FreshStream {
  FreshStream() {
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    prev = cuda::current_stream(0);
    cuda::set_current_stream(0, s);
  }
  ~FreshStream() {
    cuda::set_current_stream(0, prev);
    cudaStreamSynchronize(s);
  }
  cudaStream_t s = nullptr, prev = nullptr;
};

TEST(CudaStreams, CurrentStreamIsPerThreadAndNotTheLegacyStream) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s = cuda::current_stream(0);
  EXPECT_NE(s, nullptr);
  EXPECT_NE(s, cuda::comm_stream(0));
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreate(&side), cudaSuccess);
  {
    StreamScope scope(side);
    EXPECT_EQ(cuda::current_stream(0), side);
    cudaStream_t other = nullptr;
    std::thread([&] { other = cuda::current_stream(0); }).join();
    EXPECT_EQ(other, s);  // another thread still sees the default compute stream
  }
  EXPECT_EQ(cuda::current_stream(0), s);
  cudaStreamDestroy(side);
  {
    cuda::DeviceGuard g(0);
    EXPECT_EQ(cuda::current_device(), 0);
  }
  cuda::Event a(true), b(true);
  a.record(s);
  Tensor x = randn({1 << 20}, {.device = kGpu});
  Tensor y = (x * 2.0).sum();
  b.record(s);
  b.synchronize();
  EXPECT_GE(a.elapsed_ms(b), 0.0f);
  EXPECT_EQ(cuda::device_count(), cuda::cuda_info().device_count);
}

TEST(CudaAllocator, FreedBlockIsReusedWithoutCudaMalloc) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  void* p = nullptr;
  {
    Tensor t = empty({(3 << 20) / 4}, {.device = kGpu});  // 3 MiB: large pool
    p = t.data_ptr();
  }
  uint64_t mallocs = cuda::memory_stats(0).num_segments;
  Tensor u = empty({(3 << 20) / 4}, {.device = kGpu});
  EXPECT_EQ(u.data_ptr(), p);
  EXPECT_EQ(cuda::memory_stats(0).num_segments, mallocs);
}

TEST(CudaAllocator, SmallRequestsSplitOneSegment) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  cuda::empty_cache();
  Tensor a = empty({250}, {.device = kGpu});  // 1000 B -> 1024 B block
  Tensor b = empty({250}, {.device = kGpu});
  Tensor c = empty({10}, {.device = kGpu});  // 40 B -> 512 B block
  auto* pa = static_cast<char*>(a.data_ptr());
  EXPECT_EQ(static_cast<char*>(b.data_ptr()), pa + 1024);
  EXPECT_EQ(static_cast<char*>(c.data_ptr()), pa + 2048);
  cuda::MemoryStats s = cuda::memory_stats(0);
  EXPECT_GE(s.allocated, size_t(2560));
  EXPECT_EQ(s.reserved % (size_t(2) << 20), size_t(0));
  // Freeing the middle block and asking again fills the hole.
  b = Tensor();
  Tensor d = empty({200}, {.device = kGpu});
  EXPECT_EQ(static_cast<char*>(d.data_ptr()), pa + 1024);
}

TEST(CudaAllocator, StatisticsTrackAllocatedReservedAndPeak) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  cuda::empty_cache();
  cuda::reset_peak_memory_stats(0);
  cuda::MemoryStats s0 = cuda::memory_stats(0);
  {
    Tensor t = empty({(50 << 20) / 4}, {.device = kGpu});  // 50 MiB
    cuda::MemoryStats s1 = cuda::memory_stats(0);
    EXPECT_EQ(s1.allocated - s0.allocated, size_t(50) << 20);
    EXPECT_EQ(s1.requested - s0.requested, size_t(50) << 20);
    EXPECT_GE(s1.reserved - s0.reserved, size_t(50) << 20);
    EXPECT_EQ(s1.peak_allocated, s1.allocated);
  }
  cuda::MemoryStats s2 = cuda::memory_stats(0);
  EXPECT_EQ(s2.allocated, s0.allocated);
  EXPECT_EQ(s2.peak_allocated, s0.allocated + (size_t(50) << 20));
  EXPECT_GT(s2.reserved, s0.reserved);  // cached, not returned
  cuda::reset_peak_memory_stats(0);
  EXPECT_EQ(cuda::memory_stats(0).peak_allocated, s2.allocated);
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_stats(0).reserved, s0.reserved);
}

TEST(CudaAllocator, BlocksBelongToTheStreamTheyWereAllocatedOn) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  void* p = nullptr;
  {
    Tensor t = empty({(4 << 20) / 4}, {.device = kGpu});
    p = t.data_ptr();
  }
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  {
    StreamScope scope(side);
    Tensor u = empty({(4 << 20) / 4}, {.device = kGpu});
    EXPECT_NE(u.data_ptr(), p);  // the free block belongs to the other stream's pool
  }
  cudaStreamSynchronize(side);
  Tensor v = empty({(4 << 20) / 4}, {.device = kGpu});
  EXPECT_EQ(v.data_ptr(), p);
}

TEST(CudaAllocator, RecordStreamDelaysReuseUntilThatStreamsWorkIsDone) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  const int64_t n = (4 << 20) / 4;
  BlockedStream side;
  Tensor x = empty({n}, {.device = kGpu});
  void* p = x.data_ptr();
  cuda::record_stream(x, side.get());
  x = Tensor();  // an event is recorded on `side`, behind the blocked host function
  Tensor y = empty({n}, {.device = kGpu});
  EXPECT_NE(y.data_ptr(), p) << "reused a block that another stream may still be using";
  side.release();
  ASSERT_EQ(cudaStreamSynchronize(side.get()), cudaSuccess);
  Tensor z = empty({n}, {.device = kGpu});
  EXPECT_EQ(z.data_ptr(), p) << "the block should be free once the other stream's work is done";
  // Control: without record_stream the block is reused at once.
  void* q = z.data_ptr();
  z = Tensor();
  Tensor w = empty({n}, {.device = kGpu});
  EXPECT_EQ(w.data_ptr(), q);
}

TEST(CudaAllocator, OutOfMemoryErrorNamesTheNumbers) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FreshStream fresh;
  // A cached whole segment (the retry returns it to CUDA) and a partly used one (its free
  // blocks stay: the largest is at least the freed 4 MiB).
  Tensor whole = empty({(int64_t(100) << 20) / 4}, {.device = kGpu});
  Tensor a = empty({(int64_t(4) << 20) / 4}, {.device = kGpu});
  Tensor b = empty({(int64_t(4) << 20) / 4}, {.device = kGpu});
  whole = Tensor();
  a = Tensor();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  try {
    Tensor t = empty({int64_t(1) << 38}, {.device = kGpu});  // 1 TiB: more than any card has
    FAIL() << "allocated 1 TiB";
  } catch (const OutOfMemoryError& e) {
    const OutOfMemoryNumbers& n = e.numbers();
    const cuda::MemoryStats s = cuda::memory_stats(0);
    EXPECT_EQ(n.device, "cuda:0");
    EXPECT_EQ(n.requested, size_t(1) << 40);
    EXPECT_EQ(n.allocated, s.allocated);
    EXPECT_EQ(n.reserved, s.reserved);
    EXPECT_EQ(n.peak_allocated, s.peak_allocated);
    EXPECT_GE(n.largest_free_block, size_t(4) << 20);
    EXPECT_LE(n.largest_free_block, n.reserved - n.allocated);
    EXPECT_GT(n.device_total, size_t(0));
    EXPECT_LE(n.device_free, n.device_total);
    EXPECT_GT(s.num_frees_to_cuda, before.num_frees_to_cuda) << "the cache was not emptied";
    EXPECT_EQ(s.num_ooms, before.num_ooms + 2) << "one failure, one failed retry";
    const std::string m = e.what();
    EXPECT_EQ(
        m.rfind("CUDA out of memory on cuda:0: tried to allocate 1.00 TiB; the caching "
                "allocator holds " +
                    format_bytes(n.allocated) + " allocated, " + format_bytes(n.reserved) +
                    " reserved (largest free block " + format_bytes(n.largest_free_block) +
                    "), peak " + format_bytes(n.peak_allocated) + " in this run; the device has " +
                    format_bytes(n.device_free) + " free of " + format_bytes(n.device_total),
                0),
        0u)
        << m;
    for (const char* flag :
         {"--batch-size", "--grad-accum K", "--amp bf16", "--activation-checkpointing", "--zero 2"})
      EXPECT_NE(m.find(flag), std::string::npos) << "no " << flag << " in: " << m;
  }
  Tensor ok = ones({1000}, {.device = kGpu});  // the device is still usable
  EXPECT_EQ(ok.sum().item(), 1000.0);
}

TEST(CudaPinned, BlocksAreCachedAndNotReusedWhileACopyReadsThem) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 1 << 20;
  void* p = nullptr;
  {
    Tensor h = cuda::pinned_empty({n}, DType::F32);
    p = h.data_ptr();
  }
  uint64_t allocs = cuda::pinned_stats().num_host_allocs;
  Tensor h = cuda::pinned_empty({n}, DType::F32);
  EXPECT_EQ(h.data_ptr(), p);
  EXPECT_EQ(cuda::pinned_stats().num_host_allocs, allocs);
  std::memset(h.data_ptr(), 0, size_t(n) * 4);
  BlockedStream side;
  Tensor g = empty({n}, {.device = kGpu});
  {
    StreamScope scope(side.get());
    g.copy_(h);  // queued behind the blocked host function
  }
  h = Tensor();
  Tensor h2 = cuda::pinned_empty({n}, DType::F32);
  EXPECT_NE(h2.data_ptr(), p) << "a pinned block was reused while a copy from it was pending";
  side.release();
  ASSERT_EQ(cudaStreamSynchronize(side.get()), cudaSuccess);
  Tensor h3 = cuda::pinned_empty({n}, DType::F32);
  EXPECT_EQ(h3.data_ptr(), p);
}

TEST(CudaGraph, ReplayRecomputesWithNewInputsLikeEager) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = randn({1000, 37}, {.device = kGpu});
  Tensor w = randn({37}, {.device = kGpu});
  auto step = [&] { return softmax(relu(x * w + 1.0), 1).sum({0}); };
  Tensor warm = step();  // warm up outside the capture (lazy initialisation)
  cuda::synchronize(0);
  cuda::CudaGraph graph;
  graph.capture_begin();
  Tensor out = step();
  graph.capture_end();
  for (int i = 0; i < 3; ++i) {
    x.copy_(randn({1000, 37}, {.device = kGpu}));
    graph.replay();
    EXPECT_TRUE(all_close(step(), out, 1e-6)) << "replay " << i;
  }
}

TEST(CudaGraph, ForwardAndBackwardCaptureUpdatesTheGradient) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = randn({256, 64}, {.device = kGpu});
  Tensor w = randn({64}, {.device = kGpu, .requires_grad = true});
  auto loss_fn = [&] { return tanh(x * w).mean(); };
  loss_fn().backward();  // warm-up
  w.set_grad(Tensor());
  cuda::CudaGraph graph;
  graph.capture_begin();
  Tensor loss = loss_fn();
  loss.backward();
  graph.capture_end();
  Tensor grad = w.grad();
  for (int i = 0; i < 2; ++i) {
    x.copy_(randn({256, 64}, {.device = kGpu}));
    graph.replay();
    Tensor x64 = x.to(kCPU).to(DType::F64);
    Tensor w64 = w.detach().to(kCPU).to(DType::F64).requires_grad_(true);
    Tensor l64 = tanh(x64 * w64).mean();
    l64.backward();
    EXPECT_TRUE(all_close(l64, loss, 1e-5));
    EXPECT_TRUE(all_close(w64.grad(), grad, 1e-5));
  }
}

TEST(CudaGraph, HostSyncInsideCaptureIsAnErrorThatSaysSo) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = ones({100}, {.device = kGpu});
  cuda::CudaGraph graph;
  graph.capture_begin();
  Tensor y = x * 3.0;
  try {
    (void)y.sum().item();
    FAIL() << "item() inside a capture did not raise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("captured into a CUDA graph"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cuda::synchronize(0), Error);
  EXPECT_THROW(y.copy_(zeros({100})), Error);  // pageable host memory
  EXPECT_THROW(cuda::empty_cache(), Error);
  Tensor z = y + 1.0;
  graph.capture_end();  // the capture is still valid: nothing illegal reached CUDA
  graph.replay();
  EXPECT_TRUE(all_close(full({100}, 4.0), z, 0.0));
}

TEST(CudaGraph, PrivatePoolMemoryIsNotHandedToEagerCode) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = ones({1 << 20}, {.device = kGpu});
  void* inside = nullptr;
  {
    cuda::CudaGraph graph;
    graph.capture_begin();
    Tensor tmp = x * 2.0;
    inside = tmp.data_ptr();
    graph.capture_end();
    tmp = Tensor();  // freed into the graph's pool
    Tensor eager = empty({1 << 20}, {.device = kGpu});
    EXPECT_NE(eager.data_ptr(), inside);
    graph.replay();
  }
  cuda::synchronize(0);
}

TEST(CudaDeviceErrors, BadIndexIsReportedAtTheNextSync) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor x = randn({5, 3}, {.device = kGpu});
  Tensor bad = from_vector<int64_t>({1, 7, 2}, {3}).to(kGpu);
  Tensor y = index_select(x, 0, bad);
  try {
    cuda::synchronize(0);
    FAIL() << "no error for index 7 of a dim of size 5";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("index_select: index 7 (position 1) is out of range [0, 5)"),
              std::string::npos)
        << m;
  }
  Tensor target = from_vector<int64_t>({0, 3, 12}, {3}).to(kGpu);
  Tensor lp = log_softmax(randn({3, 4}, {.device = kGpu}), 1);
  try {
    (void)nll_loss(lp, target).item();
    FAIL() << "no error for target 12 with 4 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nll_loss: target 12"), std::string::npos) << e.what();
  }
  // Through cross_entropy the kernel is the same, but the error names the op the user called,
  // both for the forward and for a backward that runs before anyone synchronised.
  Tensor logits = randn({3, 4}, {.device = kGpu, .requires_grad = true});
  try {
    (void)cross_entropy(logits, target).item();
    FAIL() << "no error for target 12 with 4 classes";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cross_entropy: target 12 (position 2)", 0), 0u)
        << e.what();
  }
  try {
    cross_entropy(logits, target).backward();
    cuda::synchronize(0);
    FAIL() << "no error for target 12 with 4 classes";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cross_entropy: target 12", 0), 0u) << e.what();
  }
  EXPECT_EQ(ones({7}, {.device = kGpu}).sum().item(), 7.0);  // the context is still healthy
}

TEST(CudaInfo, ReportsEveryDevice) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  cuda::CudaInfo info = cuda::cuda_info();
  EXPECT_GT(info.runtime_version, 0);
  EXPECT_GE(info.driver_version, info.runtime_version / 1000 * 1000);
  EXPECT_GT(info.cudnn_version, 0);
  ASSERT_EQ(int(info.devices.size()), cuda::device_count());
  for (const auto& d : info.devices) {
    EXPECT_FALSE(d.name.empty());
    EXPECT_GT(d.total_memory, size_t(0));
    EXPECT_GE(d.major, 5);
  }
}

}  // namespace
}  // namespace loom::testing

#else  // a CPU-only build

// A build without the CUDA backend says so, counts no devices, and refuses CUDA tensors with an
// Error that names the missing support (never a crash or a silent CPU tensor).
TEST(CudaRuntime, CpuOnlyBuildHasNoCuda) {
  EXPECT_FALSE(loom::cuda::compiled_with_cuda());
  EXPECT_EQ(loom::cuda::device_count(), 0);
  EXPECT_FALSE(loom::cuda::is_available());
  std::string msg;
  try {
    loom::Tensor t = loom::empty({2}, {.device = loom::cuda_device(0)});
  } catch (const loom::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("no CUDA support"), std::string::npos) << "got: \"" << msg << "\"";
}

#endif
