// data/dataloader: order, batch sizes, determinism for 0, 1 and 3 workers, the generic and fast
// collate paths, transforms on the workers, exceptions, early stop, bounded prefetch, resume, and a
// DistributedSampler's new shuffle each epoch.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <numeric>
#include <thread>

#include "autograd/ops/factory.h"
#include "data/dataloader.h"
#include "data/mnist.h"
#include "kernels/backend.h"
#include "support/fashion_mnist.h"

using namespace loom;
using namespace loom::data;
using namespace std::chrono_literals;

namespace {

// Row i of data is (i, i + 0.5, -i); target i is 10 * i.
TensorDataset rows(int64_t n) {
  std::vector<float> d;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) {
    d.insert(d.end(), {float(i), float(i) + 0.5f, -float(i)});
    t.push_back(10 * i);
  }
  return TensorDataset(from_vector(d, {n, 3}), from_vector(t, {n}));
}

// The same examples through get() only: the loader's generic path.
class GetOnly : public Dataset {
 public:
  explicit GetOnly(TensorDataset d) : d_(std::move(d)) {}
  int64_t size() const override { return d_.size(); }
  Example get(int64_t i) const override {
    calls_++;
    Example e = d_.get(i);
    if (i == fail_at_) throw std::out_of_range("GetOnly: cannot read example " + std::to_string(i));
    return {e.data.clone(), e.target.clone()};
  }
  int64_t fail_at_ = -1;
  mutable std::atomic<int64_t> calls_{0};

 private:
  TensorDataset d_;
};

struct Seen {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<float>> data;
  std::vector<std::vector<int64_t>> target;
  bool operator==(const Seen&) const = default;
};

Seen one_epoch(DataLoader& loader) {
  Seen s;
  for (Batch& b : loader) {
    s.indices.push_back(b.indices);
    s.data.push_back(b.data.to_vector<float>());
    s.target.push_back(b.target.to_vector<int64_t>());
  }
  return s;
}

// Runs f on a thread and fails (instead of hanging the suite) when it takes longer than `limit`.
template <typename F>
void within(std::chrono::seconds limit, F f) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> fut = done->get_future();
  std::thread([f, done]() mutable {
    f();
    done->set_value();
  }).detach();
  ASSERT_EQ(fut.wait_for(limit), std::future_status::ready)
      << "did not finish within " << limit.count() << " s";
}

}  // namespace

TEST(DataLoader, SequentialOrderAndBatchSizes) {
  DataLoader loader(rows(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  Seen s = one_epoch(loader);
  ASSERT_EQ(s.indices.size(), 3u);
  EXPECT_EQ(s.indices[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.indices[2], (std::vector<int64_t>{8, 9}));  // the last, partial batch
  EXPECT_EQ(s.data[2], (std::vector<float>{8, 8.5, -8, 9, 9.5, -9}));
  EXPECT_EQ(s.target[1], (std::vector<int64_t>{40, 50, 60, 70}));

  DataLoader dropping(rows(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.size(), 2);
  Seen d = one_epoch(dropping);
  ASSERT_EQ(d.indices.size(), 2u);
  EXPECT_EQ(d.indices[1], (std::vector<int64_t>{4, 5, 6, 7}));

  DataLoader exact(rows(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(one_epoch(exact).indices.size(), 2u);
}

TEST(DataLoader, BatchShapesAndUndefinedTargets) {
  DataLoader loader(rows(5), {.batch_size = 2});
  Batch b = *loader.next();
  EXPECT_EQ(b.data.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.target.shape(), (Shape{2}));
  EXPECT_EQ(b.target.dtype(), kI64);
  EXPECT_EQ(b.index, 0);
  DataLoader no_target(TensorDataset(zeros({5, 2, 2})), {.batch_size = 3, .num_workers = 2});
  int n = 0;
  for (Batch& x : no_target) {
    EXPECT_FALSE(x.target.defined());
    EXPECT_EQ(x.data.shape(), (Shape{n == 0 ? 3 : 2, 2, 2}));
    ++n;
  }
  EXPECT_EQ(n, 2);
}

TEST(DataLoader, SameBatchesForAnyNumberOfWorkers) {
  for (bool fast : {true, false}) {
    std::vector<Seen> results;
    for (int64_t workers : {0, 1, 3}) {
      DataLoaderOptions opt{.batch_size = 7,
                            .shuffle = true,
                            .num_workers = workers,
                            .prefetch_factor = 2,
                            .seed = 123};
      std::shared_ptr<const Dataset> ds =
          fast ? std::shared_ptr<const Dataset>(std::make_shared<TensorDataset>(rows(100)))
               : std::make_shared<GetOnly>(rows(100));
      DataLoader loader(ds, opt);
      loader.set_epoch(4);
      results.push_back(one_epoch(loader));
    }
    EXPECT_EQ(results[0], results[1]) << "fast=" << fast;
    EXPECT_EQ(results[0], results[2]) << "fast=" << fast;
    // The contents match the indices, and the order is the sampler's permutation for epoch 4.
    const Seen& s = results[0];
    std::vector<int64_t> flat;
    for (size_t b = 0; b < s.indices.size(); ++b)
      for (size_t i = 0; i < s.indices[b].size(); ++i) {
        flat.push_back(s.indices[b][i]);
        EXPECT_EQ(s.data[b][3 * i], float(s.indices[b][i]));
        EXPECT_EQ(s.target[b][i], 10 * s.indices[b][i]);
      }
    EXPECT_EQ(flat, RandomSampler(100, 123).indices(4));
  }
  // Fast and generic paths agree batch for batch.
  DataLoader a(rows(50), {.batch_size = 8, .shuffle = true, .num_workers = 2, .seed = 9});
  DataLoader b(std::make_shared<GetOnly>(rows(50)),
               {.batch_size = 8, .shuffle = true, .num_workers = 2, .seed = 9});
  EXPECT_EQ(one_epoch(a), one_epoch(b));
}

TEST(DataLoader, EpochsReshuffleAndSetEpochReplays) {
  DataLoader loader(rows(40), {.batch_size = 8, .shuffle = true, .num_workers = 2, .seed = 5});
  Seen e0 = one_epoch(loader);
  EXPECT_EQ(loader.epoch(), 1);  // a finished pass moves to the next epoch
  Seen e1 = one_epoch(loader);
  EXPECT_NE(e0.indices, e1.indices);
  loader.set_epoch(0);
  EXPECT_EQ(one_epoch(loader), e0);
  loader.set_epoch(1);
  EXPECT_EQ(one_epoch(loader), e1);
  // next() ends an epoch with nothing exactly once, then continues with the next epoch.
  DataLoader n(rows(3), {.batch_size = 2});
  EXPECT_TRUE(n.next().has_value());
  EXPECT_TRUE(n.next().has_value());
  EXPECT_FALSE(n.next().has_value());
  std::optional<Batch> again = n.next();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->epoch, 1);
  EXPECT_EQ(again->indices, (std::vector<int64_t>{0, 1}));
}

TEST(DataLoader, WorkerExceptionReachesTheConsumerUnchanged) {
  for (int64_t workers : {0, 1, 3}) {
    auto ds = std::make_shared<GetOnly>(rows(60));
    ds->fail_at_ = 37;
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers});
    std::vector<int64_t> delivered;
    bool caught = false;
    try {
      for (Batch& b : loader) delivered.push_back(b.index);
    } catch (const std::out_of_range& e) {  // the worker's own exception type and message
      caught = true;
      EXPECT_STREQ(e.what(), "GetOnly: cannot read example 37");
    }
    EXPECT_TRUE(caught) << workers << " workers";
    // Batches before the failing one (35..39 is batch 7) arrived, in order.
    EXPECT_EQ(delivered, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6})) << workers << " workers";
    EXPECT_EQ(loader.state().position, 35);
  }
}

TEST(DataLoader, EarlyStopThenDestructionDoesNotHang) {
  within(30s, [] {
    for (int64_t workers : {1, 3, 8}) {
      auto ds = std::make_shared<GetOnly>(rows(2000));
      auto loader = std::make_unique<DataLoader>(
          ds, DataLoaderOptions{.batch_size = 4, .num_workers = workers, .prefetch_factor = 2});
      int taken = 0;
      for (Batch& b : *loader) {
        (void)b;
        if (++taken == 2) break;
      }
      std::this_thread::sleep_for(20ms);  // let the workers fill the window and block
      loader.reset();                     // joins them
    }
    // Destroyed without ever iterating, and right after starting.
    { DataLoader idle(rows(10), {.batch_size = 2, .num_workers = 3}); }
    {
      DataLoader started(rows(1000), {.batch_size = 1, .num_workers = 3});
      started.next();
    }
  });
}

TEST(DataLoader, PrefetchIsBounded) {
  auto ds = std::make_shared<GetOnly>(rows(1000));
  const int64_t bs = 4, workers = 3, pf = 2, window = workers * pf;
  DataLoader loader(ds, {.batch_size = bs, .num_workers = workers, .prefetch_factor = pf});
  ASSERT_TRUE(loader.next().has_value());
  // A slow consumer: the workers fill the window (delivered batch + window batches) and stop.
  const int64_t expected = (1 + window) * bs;
  for (int i = 0; i < 500 && ds->calls_.load() < expected; ++i) std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ds->calls_.load(), expected);  // not the whole epoch, and the window is used
  ASSERT_TRUE(loader.next().has_value());  // one more delivered: room for one more batch
  for (int i = 0; i < 500 && ds->calls_.load() < expected + bs; ++i)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ds->calls_.load(), expected + bs);
}

TEST(DataLoader, ResumeMidEpochGivesTheSameRemainingBatches) {
  DataLoaderOptions opt{.batch_size = 6, .shuffle = true, .num_workers = 2, .seed = 77};
  DataLoader full(rows(50), opt);
  full.set_epoch(3);
  Seen all = one_epoch(full);

  SamplerState saved;
  {
    DataLoader first(rows(50), opt);
    first.set_epoch(3);
    for (int i = 0; i < 4; ++i) first.next();
    saved = first.state();  // taken between two steps
  }
  EXPECT_EQ(saved, (SamplerState{3, 24}));
  DataLoader resumed(rows(50), opt);
  resumed.load_state(saved);
  resumed.set_epoch(3);  // the training loop's own call keeps the position
  EXPECT_EQ(resumed.batches_left(), int64_t(all.indices.size()) - 4);
  Seen rest = one_epoch(resumed);
  ASSERT_EQ(rest.indices.size(), all.indices.size() - 4);
  for (size_t i = 0; i < rest.indices.size(); ++i) {
    EXPECT_EQ(rest.indices[i], all.indices[i + 4]);
    EXPECT_EQ(rest.data[i], all.data[i + 4]);
  }
  EXPECT_EQ(resumed.state(), (SamplerState{4, 0}));

  // A loop left early continues where it stopped.
  DataLoader cont(rows(50), opt);
  cont.set_epoch(3);
  cont.next();
  std::optional<Batch> second = cont.next();
  EXPECT_EQ(second->indices, all.indices[1]);
  EXPECT_EQ(second->index, 1);
}

// 31 samples over 3 ranks do not divide: each rank takes ceil(31 / 3) = 11, 33 in all, so the
// shuffled list is padded with its first two entries (Note [DistributedSampler sizes]).
TEST(DataLoader, WithDistributedSampler) {
  const int64_t n = 31, R = 3;
  std::vector<int64_t> seen;
  for (int64_t r = 0; r < R; ++r) {
    auto sampler = std::make_shared<DistributedSampler>(
        n, DistributedSamplerOptions{.num_replicas = R, .rank = r, .seed = 4});
    DataLoader loader(std::make_shared<TensorDataset>(rows(n)), sampler,
                      {.batch_size = 4, .num_workers = 2});
    EXPECT_EQ(loader.size(), 3);  // batches of 4, 4, 3
    std::vector<int64_t> sizes;
    for (Batch& b : loader) {
      sizes.push_back(int64_t(b.indices.size()));
      // The rows are the examples the indices name, padding included.
      auto d = b.data.to_vector<float>();
      auto t = b.target.to_vector<int64_t>();
      for (size_t k = 0; k < b.indices.size(); ++k) {
        EXPECT_EQ(d[3 * k], float(b.indices[k]));
        EXPECT_EQ(t[k], 10 * b.indices[k]);
      }
      seen.insert(seen.end(), b.indices.begin(), b.indices.end());
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 3})) << "rank " << r;
  }
  ASSERT_EQ(int64_t(seen.size()), 33);
  // Every sample once, and the head of the epoch-0 permutation (seed 4) a second time.
  std::vector<int64_t> perm = random_permutation(n, 4);
  std::vector<int64_t> want(static_cast<size_t>(n));
  std::iota(want.begin(), want.end(), int64_t(0));
  want.push_back(perm[0]);
  want.push_back(perm[1]);
  std::sort(want.begin(), want.end());
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, want);
}

// A training loop's epochs over a DistributedSampler (shuffle, seed 6; 24 samples on 2 ranks): the
// loader moves to the next epoch after each pass, and each epoch is a new shuffle, the two ranks'
// batches interleaved giving random_permutation(24, 6 + epoch), a different order every epoch.
TEST(DataLoader, DistributedSamplerReshufflesEveryEpoch) {
  const int64_t n = 24, R = 2;
  std::vector<std::vector<int64_t>> orders;  // the global order of each epoch
  std::vector<std::unique_ptr<DataLoader>> loaders;
  for (int64_t r = 0; r < R; ++r)
    loaders.push_back(std::make_unique<DataLoader>(
        std::make_shared<TensorDataset>(rows(n)),
        std::make_shared<DistributedSampler>(
            n, DistributedSamplerOptions{.num_replicas = R, .rank = r, .seed = 6}),
        DataLoaderOptions{.batch_size = 5, .num_workers = 1}));
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> global(static_cast<size_t>(n));
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(loaders[size_t(r)]->epoch(), epoch) << "rank " << r;
      Seen s = one_epoch(*loaders[size_t(r)]);  // rank r took global[r], global[r + R], ...
      int64_t i = r;
      for (const auto& b : s.indices)
        for (int64_t idx : b) {
          if (i < n) global[size_t(i)] = idx;
          i += R;
        }
      EXPECT_EQ(i, n + r) << "rank " << r << " took " << (i - r) / R << " samples";
    }
    EXPECT_EQ(global, random_permutation(n, 6 + uint64_t(epoch))) << "epoch " << epoch;
    for (const auto& before : orders) EXPECT_NE(global, before) << "epoch " << epoch;
    orders.push_back(global);
  }
}

TEST(DataLoader, TransformsRunPerSampleAndDeterministically) {
  // 12 images (1, 4, 5) with distinct values; crop 4x4 with padding 1, flip with p = 0.5.
  const int64_t n = 12;
  std::vector<float> px;
  for (int64_t i = 0; i < n * 20; ++i) px.push_back(float(i + 1));
  TensorDataset images(from_vector(px, {n, 1, 4, 5}), arange(double(n)));
  auto tf = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(4, 1), std::make_shared<RandomHorizontalFlip>(0.5)});
  std::vector<Seen> results;
  for (int64_t workers : {0, 1, 3}) {
    DataLoader loader(
        images,
        {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 21, .transform = tf});
    results.push_back(one_epoch(loader));
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  // Row k of a batch is the transform of example indices[k] with SampleRng(seed, epoch, index).
  const Seen& s = results[0];
  ASSERT_EQ(s.data[0].size(), 5u * 16u);
  for (size_t b = 0; b < s.indices.size(); ++b)
    for (size_t k = 0; k < s.indices[b].size(); ++k) {
      const int64_t i = s.indices[b][k];
      SampleRng rng(21, 0, i);
      std::vector<float> want = (*tf)(images.get(i).data, rng).to_vector<float>();
      std::vector<float> got(s.data[b].begin() + long(16 * k),
                             s.data[b].begin() + long(16 * (k + 1)));
      EXPECT_EQ(got, want) << "example " << i;
    }
  // Another epoch augments differently; a flip with p = 1 through the loader really flips.
  DataLoader e1(images, {.batch_size = 5, .shuffle = true, .seed = 21, .transform = tf});
  e1.set_epoch(1);
  Seen s1 = one_epoch(e1);
  EXPECT_NE(s1.data, s.data);
  DataLoader flip(images,
                  {.batch_size = 12, .transform = std::make_shared<RandomHorizontalFlip>(1.0)});
  std::vector<float> f = flip.next()->data.to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 5; ++x)
        ASSERT_EQ(f[size_t(i * 20 + y * 5 + x)], px[size_t(i * 20 + y * 5 + 4 - x)]);
  // A transform on non-float data is an error naming the transform.
  DataLoader bad(TensorDataset(zeros({4, 2, 2}, {.dtype = kU8})),
                 {.batch_size = 2, .transform = tf});
  try {
    bad.next();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RandomCrop"), std::string::npos) << e.what();
  }
}

TEST(DataLoader, BadOptionsAreErrors) {
  EXPECT_THROW(DataLoader(rows(4), {.batch_size = 0}), Error);
  EXPECT_THROW(DataLoader(rows(4), {.num_workers = -1}), Error);
  EXPECT_THROW(DataLoader(rows(4), {.prefetch_factor = 0}), Error);
  EXPECT_THROW(DataLoader(std::make_shared<TensorDataset>(rows(4)),
                          std::make_shared<SequentialSampler>(4), {.shuffle = true}),
               Error);
  if (!has_backend(DeviceType::CUDA)) {
    EXPECT_THROW(DataLoader(rows(4), {.device = Device(DeviceType::CUDA, 0)}), Error);
  }
}

TEST(DataLoader, FashionMnistThroughput) {
  LOOM_FASHION_MNIST_OR_SKIP(root);
  FashionMNIST train(root);
  auto whole = std::make_shared<TensorDataset>(train.to_tensor_dataset());
  auto mnist = std::make_shared<FashionMNIST>(train);
  // The first batches of a sequential loader are the first rows of the normalised set.
  DataLoader check(mnist, {.batch_size = 256});
  Batch b0 = *check.next();
  std::vector<float> want = whole->get(0).data.to_vector<float>();
  EXPECT_EQ(std::vector<float>(b0.data.data<float>(), b0.data.data<float>() + 784), want);
  EXPECT_EQ(b0.target.data<int64_t>()[0], 9);

  auto cnn_tf = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(28, 2), std::make_shared<RandomHorizontalFlip>(0.5)});
  struct Case {
    const char* name;
    std::shared_ptr<const Dataset> ds;
    int64_t workers;
    std::shared_ptr<const Transform> tf;
  };
  for (const Case& c :
       {Case{"TensorDataset", whole, 0, nullptr}, Case{"TensorDataset", whole, 2, nullptr},
        Case{"FashionMNIST (uint8 -> float per batch)", mnist, 0, nullptr},
        Case{"FashionMNIST (uint8 -> float per batch)", mnist, 2, nullptr},
        Case{"TensorDataset + crop/flip", whole, 2, cnn_tf}}) {
    DataLoader loader(
        c.ds, {.batch_size = 256, .shuffle = true, .num_workers = c.workers, .transform = c.tf});
    auto t0 = std::chrono::steady_clock::now();
    int64_t samples = 0;
    for (Batch& b : loader) samples += b.data.size(0);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(samples, 60000);
    std::printf("[ loader ] %-42s workers=%lld: %8.0f samples/s (epoch of 60000 in %.3f s)\n",
                c.name, (long long)c.workers, double(samples) / secs, secs);
  }
}
