// Special tokens found in text, for the tokenizers that cut them out before anything else runs
// (data/bpe_tokenizer.h, data/wordpiece.h): which are allowed by a SpecialTokens
// (data/tokenizer.h), the refusal naming the token and its byte offset, and the leftmost-longest
// cut. Leaves out: encoding the text between them (the tokenizer's business).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer.h"

namespace loom::data {

class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher() = default;
  // text -> id; `owner` names the tokenizer in errors (an empty text, a negative id).
  SpecialTokenMatcher(std::vector<std::pair<std::string, int32_t>> tokens,
                      const std::string& owner);

  const std::vector<std::pair<std::string, int32_t>>& tokens() const { return tokens_; }
  std::optional<int32_t> find(std::string_view text) const;  // the id of a special token's text

  // Cuts `text` at the special tokens `special` allows, leftmost first and the longest of those
  // starting there (Hugging Face's rule): on_text(stretch) for each stretch before, between and
  // after them (also empty ones), on_special(id) for each token, in text order. With
  // SpecialTokens::refuse() (and kRefuse's `allowed` list) any other special token in the text is
  // an error first, naming `owner`, the token and its byte offset; a name in `allowed` that is no
  // special token is an error too.
  void split(std::string_view text, const SpecialTokens& special, const std::string& owner,
             const std::function<void(std::string_view)>& on_text,
             const std::function<void(int32_t)>& on_special) const;

 private:
  // The next allowed token at or after `from`: {offset, index into tokens_}, or {npos, 0}.
  std::pair<size_t, size_t> next(std::string_view text, size_t from,
                                 const std::vector<char>& allowed) const;
  std::vector<char> allowed(std::string_view text, const SpecialTokens& special,
                            const std::string& owner) const;

  std::vector<std::pair<std::string, int32_t>> tokens_;
  std::array<std::vector<uint32_t>, 256> by_byte_;  // by first byte, longest first
};

}  // namespace loom::data
