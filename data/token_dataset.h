// Token windows for language-model training: TokenDataset, the shards of a split (train or
// validation) checked against the vocabulary and the sequence length, as a Dataset whose example
// i is window i (data: its first T tokens, target: the T next ones, int64). A DataLoader over it
// with a DistributedSampler gives random windows per step, sharded by rank, with the position a
// checkpoint saves (train/token_data.h); with exactly_once, every validation window once.
// Leaves out: documents and padding (windows cross document boundaries, as in llm.c and
// nanoGPT), and a random offset per epoch (windows start at multiples of T).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
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
class TokenDataset final : public Dataset {
 public:
  TokenDataset(const std::vector<std::string>& files, TokenDatasetOptions opt);

  // The Dataset of windows: size() windows, get(i) = (x, y) of window i, each (T) int64; the
  // DataLoader's fast path (Note [Dataset fast path] in data/dataset.h) fills whole batches.
  int64_t size() const override { return num_windows(); }
  Example get(int64_t index) const override;
  std::optional<ExampleSpec> spec() const override;
  void gather(std::span<const int64_t> indices, const Tensor& data,
              const Tensor& target) const override;

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

}  // namespace loom::data
