// Token windows for language-model training: TokenDataset (the shards of a split, checked
// against the vocabulary and the sequence length), TokenBatchSampler (random (B, T + 1) windows
// per step, sharded by rank as the DistributedSampler shards, resumable) and TokenEvalLoader
// (every window once, in order, sharded by rank). Leaves out: devices (batches are CPU int64
// tensors; the caller moves them), documents and padding (windows cross document boundaries, as
// in llm.c and nanoGPT), and a random offset per epoch (windows start at multiples of T).
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/sampler.h"
#include "data/token_shards.h"

namespace loom::data {

// The files a pattern names, sorted: a glob ("fineweb/fineweb_train_*.bin") or one path. Errors
// when nothing matches, naming the pattern.
std::vector<std::string> glob_token_files(const std::string& pattern);

struct TokenDatasetOptions {
  int64_t vocab_size = 0;   // every token must be below it (GPT-2: 50257; bytes: 256)
  int64_t seq_len = 0;      // T: the model sees T tokens and predicts the T next ones
  int64_t max_context = 0;  // the model's context length (positions); T must not exceed it
};

// Note [Token windows]
// A window is T + 1 consecutive tokens of one shard: inputs x = window[:T], targets y =
// window[1:]. Window k of a shard of n tokens starts at token k * T, for k < (n - 1) / T
// (rounded down): consecutive windows share one token, so every token of a shard but its first
// is a target exactly once, except a tail of (n - 1) % T tokens. Windows are numbered across the
// shards in file order: shard 0's first, then shard 1's, and so on.

// A split (train or validation) of one or more shards, mapped (data/token_shards.h). Checked at
// construction, each error naming the values: 1 <= T <= max_context (both named), vocab_size in
// [1, 65536], every shard valid (Note [Token shard checks] in data/token_shards.h) and of at
// least T + 1 tokens (file, count, T), every token below vocab_size (the first that is not: file,
// position, id, vocabulary).
class TokenDataset {
 public:
  TokenDataset(const std::vector<std::string>& files, TokenDatasetOptions opt);

  const TokenDatasetOptions& options() const { return opt_; }
  int64_t seq_len() const { return opt_.seq_len; }
  int64_t num_shards() const { return int64_t(shards_.size()); }
  const TokenShard& shard(int64_t i) const { return shards_[size_t(i)]; }
  int64_t num_tokens() const { return num_tokens_; }

  // Note [Token windows]
  int64_t num_windows() const { return first_window_.back(); }
  struct Location {
    int64_t shard, start;  // the window's first token in that shard
  };
  Location locate(int64_t window) const;
  std::span<const uint16_t> window(int64_t window) const;  // its T + 1 tokens

  // x, y: int64 (B, T) with x[b] = window(windows[b])[:T] and y[b] = window(windows[b])[1:].
  void fill(std::span<const int64_t> windows, const Tensor& x, const Tensor& y) const;

 private:
  TokenDatasetOptions opt_;
  std::vector<TokenShard> shards_;
  std::vector<int64_t> first_window_;  // shard s's windows are [first_window_[s], [s + 1])
  int64_t num_tokens_ = 0;
};

// One step's batch (on the CPU).
struct TokenBatch {
  Tensor x, y;                   // int64 (B, T): inputs and targets, y = x shifted by one
  std::vector<int64_t> windows;  // the window number of each row (Note [Token windows])
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch on this rank
};

struct TokenSamplerOptions {
  int64_t batch_size = 1;    // B: windows per step on this rank
  int64_t num_replicas = 1;  // R, the world size
  int64_t rank = 0;          // r in [0, R)
  uint64_t seed = 0;
};

// Note [Token sampler]
// An epoch is a permutation of all windows seeded with seed + epoch (random_permutation), cut to
// a multiple of R and dealt to the ranks as DistributedSampler with drop_last deals it (rank r
// takes entries r, r + R, ...): the ranks' windows are disjoint and together are the windows a
// single process would see, minus the cut. Each rank takes B windows per step;
// steps_per_epoch() = (windows per rank) / B, rounded down, the same on every rank (the rest is
// dropped, so every batch is (B, T)). next() moves to the next epoch by itself when fewer than B
// windows are left. state() is {epoch, windows of the epoch this rank consumed}; like the
// DataLoader's it is a pure position (Note [Sampler position] in data/sampler.h), so a run
// restored with load_state() draws exactly the batches it would have drawn. A checkpoint saves
// the position times R (the windows all ranks consumed), as train/checkpointing.cpp does.
class TokenBatchSampler {
 public:
  TokenBatchSampler(std::shared_ptr<const TokenDataset> data, TokenSamplerOptions opt);

  TokenBatch next();
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t batches_left() const;  // in the current epoch

  void set_epoch(int64_t epoch);  // the current epoch keeps its position
  int64_t epoch() const { return sampler_.epoch(); }
  SamplerState state() const { return sampler_.state(); }
  void load_state(const SamplerState& s);  // position a multiple of B, within the epoch

  const TokenDataset& dataset() const { return *data_; }
  const TokenSamplerOptions& options() const { return opt_; }
  // This rank's windows of `epoch`, in order (what next() hands out, B at a time).
  std::vector<int64_t> windows(int64_t epoch) const { return sampler_.indices(epoch); }

 private:
  std::shared_ptr<const TokenDataset> data_;
  TokenSamplerOptions opt_;
  DistributedSampler sampler_;
  int64_t steps_per_epoch_ = 0;
  int64_t order_epoch_ = -1;  // the epoch whose order is cached
  std::vector<int64_t> order_;
};

// Evaluation: every window of the dataset once, in order. Rank r takes windows r, r + R, ...
// (DistributedSampler's exactly_once mode), B at a time, the last batch smaller when they do
// not divide; with max_batches > 0 each rank stops after that many (then the ranks together
// cover the first max_batches * B * R windows). next() returns nothing at the end and rewinds,
// so each pass (for (TokenBatch& b : loader)) starts at the first window.
class TokenEvalLoader {
 public:
  TokenEvalLoader(std::shared_ptr<const TokenDataset> data, int64_t batch_size,
                  int64_t num_replicas = 1, int64_t rank = 0, int64_t max_batches = 0);

  std::optional<TokenBatch> next();
  int64_t size() const;  // batches per pass on this rank
  void reset() { batch_ = 0; }

  class Iterator {
   public:
    explicit Iterator(TokenEvalLoader* l) : loader_(l), current_(l->next()) {}
    TokenBatch& operator*() { return *current_; }
    TokenBatch* operator->() { return &*current_; }
    Iterator& operator++() {
      current_ = loader_->next();
      return *this;
    }
    bool operator==(std::default_sentinel_t) const { return !current_.has_value(); }

   private:
    TokenEvalLoader* loader_;
    std::optional<TokenBatch> current_;
  };
  Iterator begin() {
    reset();
    return Iterator(this);
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  std::shared_ptr<const TokenDataset> data_;
  int64_t batch_size_, max_batches_;
  std::vector<int64_t> mine_;  // this rank's windows
  int64_t batch_ = 0;          // the next batch
};

}  // namespace loom::data
