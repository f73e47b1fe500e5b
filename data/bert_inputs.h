// BERT's input layout, built from token ids: [CLS] A [SEP] for one segment, [CLS] A [SEP] B [SEP]
// for a pair, with the token types (segment ids) BERT's embeddings read, and Hugging Face's
// longest-first truncation to a maximum length. Works with any tokenizer's ids. Leaves out:
// tokenizing (data/wordpiece.h has encode_single / encode_pair), padding and batching (data/mlm.h).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace loom::data {

// One example: ids and, position by position, its token type: 0 for [CLS], A and the [SEP] after
// A; 1 for B and the [SEP] after B (`tokenizers`' TemplateProcessing for BERT,
// "[CLS] $A [SEP] $B:1 [SEP]:1").
struct BertInput {
  std::vector<int32_t> ids = {};
  std::vector<int32_t> token_types = {};
};

// Note [Longest-first truncation]
// How many tokens A and B keep when [CLS] A [SEP] B [SEP] must fit max_length, as `tokenizers`'
// TruncationStrategy::LongestFirst decides (its truncate_encodings; transformers' fast tokenizers
// with truncation="longest_first", the default for truncation=True). Let T = max_length - 3 (the
// special tokens stay), s the shorter length and l the longer (A counts as the shorter when they
// are equal). When s + l <= T nothing is cut. Otherwise, when 2s <= T the shorter stays whole and
// the longer keeps T - s; else the shorter keeps floor(T / 2) and the longer ceil(T / 2). Tokens
// are cut from the end of each segment. transformers' slow tokenizers remove one token at a time
// from the longer (B on ties), which can differ by one on an odd T: loom follows the fast ones.
std::pair<size_t, size_t> longest_first_lengths(size_t n_a, size_t n_b, size_t budget);

// [CLS] a [SEP], a cut to max_length - 2 tokens; max_length 0: no limit, else at least 2 (an error
// naming it otherwise).
BertInput bert_input(std::span<const int32_t> a, int32_t cls_id, int32_t sep_id,
                     int64_t max_length = 0);
// [CLS] a [SEP] b [SEP], cut by Note [Longest-first truncation] to max_length; max_length 0: no
// limit, else at least 3 (an error naming it otherwise; `tokenizers` would return the pair uncut).
BertInput bert_input(std::span<const int32_t> a, std::span<const int32_t> b, int32_t cls_id,
                     int32_t sep_id, int64_t max_length = 0);

}  // namespace loom::data
