// Samplers: the order in which a loader visits a dataset, one epoch at a time. Sequential,
// Random (a seeded permutation per epoch) and Distributed (one shard per rank, as PyTorch's), each
// with a position so a run can stop mid-epoch and resume at the same sample.
// Leaves out: batching (the DataLoader cuts the order into batches) and weighted sampling.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::data {

// What a checkpoint stores to resume a sampler (or a loader) mid-epoch.
struct SamplerState {
  int64_t epoch = 0;
  int64_t position = 0;  // indices of this epoch already consumed (handed to the training loop)
  bool operator==(const SamplerState&) const = default;
};

// Note [Sampler position]
// A sampler's order is a pure function of (its options, epoch): indices(epoch) computes the whole
// list, so no hidden RNG state has to be saved. The position counts indices already consumed in
// the current epoch; the DataLoader advances it as it hands out batches (not when workers
// prefetch them), so state() taken between two training steps names exactly the next sample.
// set_epoch(e) with a new e rewinds the position to 0; with the current epoch it keeps it, so a
// resumed program that calls set_epoch(epoch) at the top of its loop does not lose its place.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // Number of indices in one epoch.
  virtual int64_t size() const = 0;
  // The whole order of epoch `epoch` (size() indices).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;

  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  int64_t position() const { return position_; }
  void set_position(int64_t position);  // 0 <= position <= size()
  SamplerState state() const { return {epoch_, position_}; }
  void load_state(const SamplerState& s);

  // By hand, without a loader: the next up to n indices of the current epoch (advancing the
  // position); empty at the end of the epoch.
  std::vector<int64_t> next(int64_t n);

 private:
  int64_t epoch_ = 0;
  int64_t position_ = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler final : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// A permutation of 0..n-1 drawn from Philox seeded with seed + epoch (see random_permutation).
class RandomSampler final : public Sampler {
 public:
  explicit RandomSampler(int64_t n, uint64_t seed = 0);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;  // R, the world size
  int64_t rank = 0;          // r in [0, R)
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  // Beyond PyTorch: evaluation mode. No padding and nothing dropped: rank r takes
  // indices[r : N : R], so every sample is seen exactly once across ranks (ranks may differ by
  // one).
  bool exactly_once = false;
};

// Note [DistributedSampler sizes]
// num_samples = ceil(N / R); with drop_last and N % R != 0, ceil((N - R) / R). total = num_samples
// * R. Without drop_last the index list is padded to total by repeating it from its head (as many
// times as needed when total > 2N); with drop_last it is cut to total. Rank r takes
// indices[r : total : R]. The list is a permutation seeded with seed + epoch when shuffling.
class DistributedSampler final : public Sampler {
 public:
  DistributedSampler(int64_t n, DistributedSamplerOptions opt);
  int64_t size() const override { return num_samples_; }  // this rank's share
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t total_size() const { return total_; }
  const DistributedSamplerOptions& options() const { return opt_; }

 private:
  int64_t n_;
  DistributedSamplerOptions opt_;
  int64_t num_samples_ = 0, total_ = 0;
};

// A uniformly random permutation of 0..n-1 (Fisher-Yates driven by Philox with key `seed`), the
// same on every platform and standard library (std::shuffle's algorithm is not specified).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace loom::data
