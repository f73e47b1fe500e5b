// TokenDataset: shards checked and mapped, windows numbered across them. See token_dataset.h.
#include "data/token_dataset.h"

#include <glob.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/parallel.h"

namespace loom::data {

namespace {

// The position of the first token of `t` that is >= vocab, or -1. Parallel (a split of GPT-2
// tokens may hold billions): each block of kBlock tokens records its own first, the smallest
// wins.
int64_t first_token_at_or_above(std::span<const uint16_t> t, int64_t vocab) {
  if (vocab > std::numeric_limits<uint16_t>::max()) return -1;
  constexpr int64_t kBlock = int64_t(1) << 20;
  const int64_t n = int64_t(t.size()), blocks = (n + kBlock - 1) / kBlock;
  std::vector<int64_t> first(size_t(blocks), -1);
  cpu::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
        if (t[size_t(i)] >= vocab) {
          first[size_t(b)] = i;
          break;
        }
      }
    }
  });
  for (int64_t f : first)
    if (f >= 0) return f;
  return -1;
}

}  // namespace

std::vector<std::string> glob_token_files(const std::string& pattern) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  LOOM_CHECK(rc != GLOB_NOSPACE && rc != GLOB_ABORTED, "glob_token_files: cannot expand '", pattern,
             "' (", rc == GLOB_NOSPACE ? "out of memory" : "a folder could not be read", ")");
  LOOM_CHECK(!out.empty(), "glob_token_files: no file matches '", pattern, "'");
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------- TokenDataset

TokenDataset::TokenDataset(const std::vector<std::string>& files, TokenDatasetOptions opt)
    : opt_(opt) {
  const int64_t T = opt.seq_len;
  LOOM_CHECK(opt.max_context >= 1, "TokenDataset: max_context ", opt.max_context,
             " must be positive (the model's context length)");
  LOOM_CHECK(T >= 1, "TokenDataset: sequence length T = ", T, " must be positive");
  LOOM_CHECK(T <= opt.max_context, "TokenDataset: sequence length T = ", T,
             " is larger than the model's context ", opt.max_context,
             " (max_context); shorten the sequence or grow the model's context");
  LOOM_CHECK(opt.vocab_size >= 1 && opt.vocab_size <= 65536, "TokenDataset: vocab_size ",
             opt.vocab_size, " is outside [1, 65536] (uint16 tokens)");
  LOOM_CHECK(!files.empty(), "TokenDataset: no shard files given");
  first_window_.push_back(0);
  for (const std::string& f : files) {
    TokenShard s(f);
    LOOM_CHECK(s.size() >= T + 1, "TokenDataset: token shard ", f, " holds ", s.size(),
               " tokens, fewer than T + 1 = ", T + 1, " (one window of sequence length T = ", T,
               ")");
    int64_t bad = first_token_at_or_above(s.tokens(), opt.vocab_size);
    LOOM_CHECK(bad < 0, "TokenDataset: token shard ", f, ": token ", s.tokens()[size_t(bad)],
               " at position ", bad, " is outside the vocabulary [0, ", opt.vocab_size,
               ") (vocab_size; tokenized for another model?)");
    num_tokens_ += s.size();
    first_window_.push_back(first_window_.back() + (s.size() - 1) / T);
    shards_.push_back(std::move(s));
  }
}

TokenDataset::Location TokenDataset::locate(int64_t window) const {
  LOOM_CHECK(window >= 0 && window < num_windows(), "TokenDataset: window ", window,
             " is out of range for ", num_windows(), " windows");
  // The last shard whose first window is <= window.
  auto it = std::upper_bound(first_window_.begin(), first_window_.end(), window);
  const int64_t s = int64_t(it - first_window_.begin()) - 1;
  return {s, (window - first_window_[size_t(s)]) * opt_.seq_len};
}

std::span<const uint16_t> TokenDataset::window(int64_t window) const {
  Location l = locate(window);
  return shards_[size_t(l.shard)].tokens().subspan(size_t(l.start), size_t(opt_.seq_len + 1));
}

void TokenDataset::fill(std::span<const int64_t> windows, const Tensor& x, const Tensor& y) const {
  const int64_t B = int64_t(windows.size()), T = opt_.seq_len;
  const Shape want{B, T};
  LOOM_CHECK(x.dtype() == kI64 && y.dtype() == kI64 && x.device().is_cpu() && y.device().is_cpu() &&
                 x.is_contiguous() && y.is_contiguous() && x.shape() == want && y.shape() == want,
             "TokenDataset::fill: ", B, " windows of T = ", T, " need contiguous CPU int64 ", want,
             " tensors, got x ", describe(x), " and y ", describe(y));
  int64_t* xp = x.data<int64_t>();
  int64_t* yp = y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    std::span<const uint16_t> w = window(windows[size_t(b)]);
    for (int64_t t = 0; t < T; ++t) {
      xp[b * T + t] = w[size_t(t)];
      yp[b * T + t] = w[size_t(t) + 1];
    }
  }
}

Example TokenDataset::get(int64_t index) const {
  LOOM_CHECK(index >= 0 && index < num_windows(), "TokenDataset: window ", index,
             " is outside [0, ", num_windows(), ")");
  Tensor x = empty({1, opt_.seq_len}, {.dtype = kI64}),
         y = empty({1, opt_.seq_len}, {.dtype = kI64});
  fill(std::span<const int64_t>(&index, 1), x, y);
  return {x.view({opt_.seq_len}), y.view({opt_.seq_len})};
}

std::optional<ExampleSpec> TokenDataset::spec() const {
  return ExampleSpec{.data_shape = {opt_.seq_len},
                     .data_dtype = kI64,
                     .target_shape = {opt_.seq_len},
                     .target_dtype = kI64,
                     .has_target = true};
}

void TokenDataset::gather(std::span<const int64_t> indices, const Tensor& data,
                          const Tensor& target) const {
  for (int64_t i : indices)
    LOOM_CHECK(i >= 0 && i < num_windows(), "TokenDataset: window ", i, " is outside [0, ",
               num_windows(), ")");
  fill(indices, data, target);
}

}  // namespace loom::data
