// bert_input and longest_first_lengths (data/bert_inputs.h): Note [Longest-first truncation] and
// the template of BERT's post-processor. Leaves out: the other truncation strategies
// (only_first, only_second) and overflowing tokens with a stride (loom returns no overflow).
#include "data/bert_inputs.h"

#include "core/error.h"

namespace loom::data {

std::pair<size_t, size_t> longest_first_lengths(size_t n_a, size_t n_b, size_t budget) {
  if (n_a + n_b <= budget) return {n_a, n_b};
  const bool swap = n_a > n_b;
  const size_t shorter = swap ? n_b : n_a;
  size_t keep_short = shorter, keep_long = budget - shorter;
  if (2 * shorter > budget) keep_short = budget / 2, keep_long = budget - budget / 2;
  return swap ? std::pair(keep_long, keep_short) : std::pair(keep_short, keep_long);
}

BertInput bert_input(std::span<const int32_t> a, int32_t cls_id, int32_t sep_id,
                     int64_t max_length) {
  LOOM_CHECK(max_length == 0 || max_length >= 2, "bert_input: max_length ", max_length,
             " leaves no room for [CLS] and [SEP] (0: no limit, else at least 2)");
  size_t n = a.size();
  if (max_length > 0) n = std::min(n, size_t(max_length - 2));
  BertInput out;
  out.ids.reserve(n + 2);
  out.ids.push_back(cls_id);
  out.ids.insert(out.ids.end(), a.begin(), a.begin() + std::ptrdiff_t(n));
  out.ids.push_back(sep_id);
  out.token_types.assign(out.ids.size(), 0);
  return out;
}

BertInput bert_input(std::span<const int32_t> a, std::span<const int32_t> b, int32_t cls_id,
                     int32_t sep_id, int64_t max_length) {
  LOOM_CHECK(max_length == 0 || max_length >= 3, "bert_input: max_length ", max_length,
             " leaves no room for a pair's [CLS], [SEP], [SEP] (0: no limit, else at least 3)");
  auto [n_a, n_b] = max_length > 0
                        ? longest_first_lengths(a.size(), b.size(), size_t(max_length - 3))
                        : std::pair(a.size(), b.size());
  BertInput out;
  out.ids.reserve(n_a + n_b + 3);
  out.ids.push_back(cls_id);
  out.ids.insert(out.ids.end(), a.begin(), a.begin() + std::ptrdiff_t(n_a));
  out.ids.push_back(sep_id);
  out.token_types.assign(out.ids.size(), 0);
  out.ids.insert(out.ids.end(), b.begin(), b.begin() + std::ptrdiff_t(n_b));
  out.ids.push_back(sep_id);
  out.token_types.resize(out.ids.size(), 1);
  return out;
}

}  // namespace loom::data
