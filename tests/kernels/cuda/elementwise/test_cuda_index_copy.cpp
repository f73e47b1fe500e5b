// Tensor::index_copy_ on CUDA (kernels/cuda/elementwise/cuda_index.cu) against the CPU's on the
// same values: every dim, 1-, 2-, 4- and 8-byte elements, the rows not indexed left as they were;
// an index in a device tensor changed in place between two CUDA-graph replays writes the new row
// (the static KV cache's slot); an index out of range is reported through the device error slot,
// naming the op, the value and the dim's size. Skipped without a GPU.
#ifdef LOOM_WITH_CUDA

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"

namespace loom {
namespace {

const Device kGpu = Device(DeviceType::CUDA, 0);

TEST(CudaIndexCopy, EqualsTheCpuInEveryDimAndElementSize) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (DType dt : {kBool, kBF16, kF32, kI64})
    for (int64_t dim : {0, 1, 2}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dim " + std::to_string(dim));
      Shape shape{4, 6, 5}, src_shape = shape;
      src_shape[size_t(dim)] = 2;
      Tensor dst = to(randn(shape) * 10.0, dt), src = to(randn(src_shape) * 10.0, dt);
      if (dt == kBool) dst = gt(randn(shape), 0.0), src = gt(randn(src_shape), 0.0);
      Tensor index = from_vector<int64_t>({3, 0}, {2});
      Tensor gpu = dst.to(kGpu);
      dst.index_copy_(dim, index, src);
      gpu.index_copy_(dim, index.to(kGpu), src.to(kGpu));
      EXPECT_EQ(to(gpu.to(Device()), kF64).to_vector<double>(), to(dst, kF64).to_vector<double>());
    }
}

TEST(CudaIndexCopy, AGraphReplayWritesTheRowTheDeviceIndexNamesNow) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  autograd::NoGradGuard no_grad;
  Tensor cache = zeros({1, 2, 8, 4}, {.device = kGpu});  // (B, H, max_len, D)
  Tensor row = ones({1, 2, 1, 4}, {.device = kGpu});
  Tensor position = zeros({1}, {.dtype = kI64, .device = kGpu});
  cache.index_copy_(2, position, row);  // warm-up outside the capture
  cuda::synchronize(0);
  cuda::CudaGraph graph;
  graph.capture_begin();
  cache.index_copy_(2, position, row);
  graph.capture_end();
  cache.zero_();
  for (int64_t p : {5, 2}) {
    position.fill_(double(p));
    row.fill_(double(p) + 1.0);
    graph.replay();
  }
  Tensor host = cache.to(Device());
  for (int64_t slot = 0; slot < 8; ++slot) {
    const double want = slot == 5 ? 6.0 : slot == 2 ? 3.0 : 0.0;
    EXPECT_EQ(host.select(2, slot).sum().item() / 8.0, want) << "slot " << slot;
  }
}

TEST(CudaIndexCopy, AnIndexOutOfRangeIsReportedAtTheNextSync) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor dst = zeros({5, 3}, {.device = kGpu});
  dst.index_copy_(0, from_vector<int64_t>({1, 9}, {2}).to(kGpu), ones({2, 3}, {.device = kGpu}));
  try {
    cuda::synchronize(0);
    FAIL() << "no error for index 9 of a dim of size 5";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("index_copy_: index 9 (position 1) is out of range [0, 5)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace loom

#endif  // LOOM_WITH_CUDA
