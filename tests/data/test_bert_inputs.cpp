// data/bert_inputs: BERT's [CLS] A [SEP] (B [SEP]) layout and token types, and longest-first
// truncation against the lengths `tokenizers` 0.23 kept (Note [Longest-first truncation]).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/bert_inputs.h"

using namespace loom;
using namespace loom::data;

TEST(BertInputs, LongestFirstAsTokenizersTruncates) {
  // {len A, len B, max_length, kept A, kept B}: tokenizers' encode(a, b) with
  // enable_truncation(max_length, strategy="longest_first") and BERT's template.
  const int cases[][5] = {{3, 10, 8, 2, 3},  {10, 3, 8, 3, 2}, {10, 12, 8, 2, 3}, {10, 12, 9, 3, 3},
                          {12, 10, 9, 3, 3}, {5, 5, 10, 3, 4}, {5, 5, 9, 3, 3},   {4, 4, 9, 3, 3},
                          {1, 20, 6, 1, 2},  {20, 1, 6, 2, 1}, {0, 9, 5, 0, 2},   {9, 0, 5, 2, 0},
                          {7, 7, 3, 0, 0},   {2, 3, 8, 2, 3},  {6, 2, 7, 2, 2},   {2, 6, 7, 2, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c[0]) + ", " + std::to_string(c[1]) + " to " +
                 std::to_string(c[2]));
    const auto [a, b] = longest_first_lengths(size_t(c[0]), size_t(c[1]), size_t(c[2] - 3));
    EXPECT_EQ(a, size_t(c[3]));
    EXPECT_EQ(b, size_t(c[4]));
  }
}

TEST(BertInputs, SingleAndPairLayout) {
  const std::vector<int32_t> a = {10, 11, 12, 13}, b = {20, 21};
  BertInput x = bert_input(a, 101, 102);
  EXPECT_EQ(x.ids, (std::vector<int32_t>{101, 10, 11, 12, 13, 102}));
  EXPECT_EQ(x.token_types, std::vector<int32_t>(6, 0));
  x = bert_input(a, 101, 102, 4);  // cut from the end
  EXPECT_EQ(x.ids, (std::vector<int32_t>{101, 10, 11, 102}));
  x = bert_input(std::vector<int32_t>{}, 101, 102, 2);
  EXPECT_EQ(x.ids, (std::vector<int32_t>{101, 102}));
  x = bert_input(a, b, 101, 102);
  EXPECT_EQ(x.ids, (std::vector<int32_t>{101, 10, 11, 12, 13, 102, 20, 21, 102}));
  EXPECT_EQ(x.token_types, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 1, 1}));
  x = bert_input(a, b, 101, 102, 7);  // room 4: B (2) whole, A keeps 2
  EXPECT_EQ(x.ids, (std::vector<int32_t>{101, 10, 11, 102, 20, 21, 102}));
  EXPECT_EQ(x.token_types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1}));
  x = bert_input(a, b, 101, 102, 100);  // fits: nothing cut
  EXPECT_EQ(x.ids.size(), 9u);
}

TEST(BertInputs, MaxLengthTooSmallForTheSpecialTokens) {
  const std::vector<int32_t> a = {1};
  try {
    bert_input(a, a, 101, 102, 2);
    ADD_FAILURE() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bert_input: max_length 2 leaves no room for a pair's"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(bert_input(a, 101, 102, 1), Error);
  EXPECT_THROW(bert_input(a, 101, 102, -1), Error);
}
