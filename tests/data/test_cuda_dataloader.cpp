// data/dataloader on a GPU: batches collated into pinned memory and copied to the device equal
// the CPU loader's batches; pinned blocks are reused; a dataset already on the GPU is batched
// there. Compiled only in CUDA builds; skipped when no GPU is present.
#include <gtest/gtest.h>

#include "support/fashion_mnist.h"

#ifdef LOOM_WITH_CUDA
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "autograd/ops/factory.h"
#include "autograd/ops/shape.h"
#include "core/cuda/host_allocator.h"
#include "core/cuda/stream.h"
#include "data/dataloader.h"
#include "data/mnist.h"

using namespace loom;
using namespace loom::data;

namespace {

TensorDataset images(int64_t n) {
  std::vector<float> d;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 64; ++j) d.push_back(float(i) + float(j) / 64.0f);
    t.push_back(i % 10);
  }
  return TensorDataset(from_vector(d, {n, 1, 8, 8}), from_vector(t, {n}));
}

}  // namespace

TEST(DataLoaderCuda, PinnedBatchesOnTheDeviceEqualCpuBatches) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const Device gpu(DeviceType::CUDA, 0);
  auto tf = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(8, 2), std::make_shared<RandomHorizontalFlip>(0.5)});
  for (int64_t workers : {0, 2}) {
    for (bool with_tf : {false, true}) {
      DataLoaderOptions opt{.batch_size = 32,
                            .shuffle = true,
                            .num_workers = workers,
                            .seed = 3,
                            .transform = with_tf ? tf : nullptr};
      DataLoader cpu_loader(images(1000), opt);
      opt.device = gpu;
      DataLoader gpu_loader(images(1000), opt);
      const uint64_t allocs_before = loom::cuda::pinned_stats().num_host_allocs;
      int batches = 0;
      while (true) {
        std::optional<Batch> a = cpu_loader.next(), b = gpu_loader.next();
        ASSERT_EQ(a.has_value(), b.has_value());
        if (!a) break;
        ASSERT_EQ(b->data.device(), gpu);
        ASSERT_EQ(b->target.device(), gpu);
        ASSERT_EQ(a->indices, b->indices);
        ASSERT_EQ(a->data.to_vector<float>(), b->data.to_vector<float>());
        ASSERT_EQ(a->target.to_vector<int64_t>(), b->target.to_vector<int64_t>());
        ++batches;
      }
      EXPECT_EQ(batches, 32);
      // Pinned blocks come back to the cache once their copies finished: a handful of
      // cudaHostAlloc calls for 32 batches, not one per batch.
      EXPECT_LE(loom::cuda::pinned_stats().num_host_allocs - allocs_before,
                uint64_t(2 * (2 * workers + 4)));
    }
  }
}

TEST(DataLoaderCuda, DatasetOnTheDeviceIsBatchedThere) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const Device gpu(DeviceType::CUDA, 0);
  TensorDataset host = images(300);
  auto on_gpu = std::make_shared<TensorDataset>(to(host.data(), gpu), to(host.target(), gpu));
  DataLoader a(host, {.batch_size = 64, .shuffle = true, .seed = 8});
  DataLoader b(on_gpu,
               {.batch_size = 64, .shuffle = true, .num_workers = 2, .device = gpu, .seed = 8});
  while (true) {
    std::optional<Batch> x = a.next(), y = b.next();
    ASSERT_EQ(x.has_value(), y.has_value());
    if (!x) break;
    ASSERT_EQ(y->data.device(), gpu);
    ASSERT_EQ(x->data.to_vector<float>(), y->data.to_vector<float>());
    ASSERT_EQ(x->target.to_vector<int64_t>(), y->target.to_vector<int64_t>());
  }
  // Transforms run on the host: asking for one with a device dataset is an error.
  EXPECT_THROW(DataLoader(on_gpu, {.transform = std::make_shared<RandomHorizontalFlip>(0.5)}),
               Error);
}
TEST(DataLoaderCuda, FashionMnistToTheGpuThroughput) {
  if (!loom::cuda::is_available()) GTEST_SKIP() << "no GPU";
  LOOM_FASHION_MNIST_OR_SKIP(root);
  const Device gpu(DeviceType::CUDA, 0);
  FashionMNIST train(root);
  auto whole = std::make_shared<TensorDataset>(train.to_tensor_dataset());
  auto resident = std::make_shared<TensorDataset>(to(whole->data(), gpu), to(whole->target(), gpu));
  struct Case {
    const char* name;
    std::shared_ptr<const Dataset> ds;
    int64_t workers;
    bool pin;
  };
  for (const Case& c : {Case{"host TensorDataset, pinned", whole, 0, true},
                        Case{"host TensorDataset, pinned", whole, 2, true},
                        Case{"host TensorDataset, pageable", whole, 2, false},
                        Case{"TensorDataset on the GPU", resident, 0, true}}) {
    for (int rep = 0; rep < 2; ++rep) {  // the first pass warms the pinned and device caches
      DataLoader loader(c.ds, {.batch_size = 256,
                               .shuffle = true,
                               .num_workers = c.workers,
                               .pin_memory = c.pin,
                               .device = gpu});
      auto t0 = std::chrono::steady_clock::now();
      int64_t samples = 0;
      for (Batch& b : loader) samples += b.data.size(0);
      loom::cuda::synchronize(0);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_EQ(samples, 60000);
      if (rep == 1)
        std::printf("[ loader->gpu ] %-30s workers=%lld: %9.0f samples/s (epoch in %.3f s)\n",
                    c.name, (long long)c.workers, double(samples) / secs, secs);
    }
  }
}
#endif  // LOOM_WITH_CUDA
