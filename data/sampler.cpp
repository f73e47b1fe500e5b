// Samplers: sequential, random per epoch, distributed shards (Note [DistributedSampler sizes]).
#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/philox.h"

namespace loom::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  LOOM_CHECK(n >= 0, "random_permutation: n = ", n, " is negative");
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  // Fisher-Yates from the back: swap slot i with a uniform j in [0, i]. Draw i uses 64 bits of
  // Philox block i / 2, mapped to [0, i] by the multiply-shift (bias below (i + 1) / 2^64).
  for (int64_t i = n - 1; i > 0; --i) {
    Philox4 r = philox4x32(seed, uint64_t(i) / 2, 0);
    int w = int(i % 2) * 2;
    uint64_t x = (uint64_t(r.v[w]) << 32) | r.v[w + 1];
    auto j = int64_t((static_cast<unsigned __int128>(x) * uint64_t(i + 1)) >> 64);
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

// ---------------------------------------------------------------- Sampler (position)

void Sampler::set_epoch(int64_t epoch) {
  LOOM_CHECK(epoch >= 0, "Sampler::set_epoch: epoch ", epoch, " is negative");
  if (epoch != epoch_) position_ = 0;  // Note [Sampler position]
  epoch_ = epoch;
}

void Sampler::set_position(int64_t position) {
  LOOM_CHECK(position >= 0 && position <= size(), "Sampler::set_position: position ", position,
             " is outside [0, ", size(), "] (indices per epoch)");
  position_ = position;
}

void Sampler::load_state(const SamplerState& s) {
  LOOM_CHECK(s.epoch >= 0, "Sampler::load_state: epoch ", s.epoch, " is negative");
  LOOM_CHECK(s.position >= 0 && s.position <= size(), "Sampler::load_state: position ", s.position,
             " is outside [0, ", size(),
             "]: the checkpoint was saved with a different dataset or world size");
  epoch_ = s.epoch;
  position_ = s.position;
}

std::vector<int64_t> Sampler::next(int64_t n) {
  LOOM_CHECK(n > 0, "Sampler::next: n = ", n, " must be positive");
  if (position_ >= size()) return {};
  std::vector<int64_t> all = indices(epoch_);
  int64_t end = std::min<int64_t>(position_ + n, int64_t(all.size()));
  std::vector<int64_t> out(all.begin() + position_, all.begin() + end);
  position_ = end;
  return out;
}

// ---------------------------------------------------------------- Sequential, Random

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  LOOM_CHECK(n >= 0, "SequentialSampler: dataset size ", n, " is negative");
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  LOOM_CHECK(n >= 0, "RandomSampler: dataset size ", n, " is negative");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const {
  return random_permutation(n_, seed_ + uint64_t(epoch));
}

// ---------------------------------------------------------------- Distributed

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions opt)
    : n_(n), opt_(opt) {
  const int64_t R = opt.num_replicas;
  LOOM_CHECK(n >= 0, "DistributedSampler: dataset size ", n, " is negative");
  LOOM_CHECK(R >= 1, "DistributedSampler: num_replicas = ", R, " must be at least 1");
  LOOM_CHECK(opt.rank >= 0 && opt.rank < R, "DistributedSampler: rank ", opt.rank,
             " is outside [0, ", R, ") for num_replicas = ", R);
  LOOM_CHECK(!(opt.exactly_once && opt.drop_last),
             "DistributedSampler: exactly_once (every sample once, for evaluation) and drop_last "
             "contradict "
             "each other; set one of them");
  if (opt.exactly_once) {
    // rank r gets the indices r, r + R, ... below N.
    num_samples_ = n > opt.rank ? (n - opt.rank + R - 1) / R : 0;
    total_ = n;
  } else {
    // Note [DistributedSampler sizes]
    if (opt.drop_last && n % R != 0)
      num_samples_ = n >= R ? (n - R + R - 1) / R : 0;  // ceil((N - R) / R)
    else
      num_samples_ = (n + R - 1) / R;  // ceil(N / R)
    total_ = num_samples_ * R;
  }
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (opt_.shuffle) {
    all = random_permutation(n_, opt_.seed + uint64_t(epoch));
  } else {
    all.resize(size_t(n_));
    std::iota(all.begin(), all.end(), int64_t(0));
  }
  if (!opt_.exactly_once) {
    if (int64_t(all.size()) < total_) {
      // Pad by repeating from the head, as often as needed (only N = 0 cannot be padded).
      LOOM_CHECK(n_ > 0, "DistributedSampler: cannot pad an empty dataset to ", total_, " indices");
      for (int64_t i = n_; i < total_; ++i) all.push_back(all[size_t((i - n_) % n_)]);
    } else {
      all.resize(size_t(total_));  // drop_last: cut the tail
    }
  }
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = opt_.rank; i < total_; i += opt_.num_replicas) mine.push_back(all[size_t(i)]);
  return mine;
}

}  // namespace loom::data
