// The pre-tokenizer of a BPE tokenizer: a regular expression (PCRE2, JIT-compiled, Unicode
// properties) that cuts text into the pieces BPE merges within. Leaves out: the merging
// (data/bpe_merges.h) and special tokens (split out before, data/bpe_tokenizer.h).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace loom::data {

// Note [Pre-tokenizer regexes]
// The regexes are tiktoken's (Rust's fancy-regex) and Hugging Face's (Oniguruma); PCRE2 runs them
// with the same meaning, given:
// - UTF-8 and Unicode properties (PCRE2_UTF | PCRE2_UCP): \p{L}, \p{N}, case-insensitive (?i:'s)
//   folding as Unicode does (the long s U+017F matches s);
// - \s and \S rewritten to \p{White_Space} and \P{White_Space} (to_pcre2): PCRE2's \s also takes
//   U+180E MONGOLIAN VOWEL SEPARATOR, which Unicode 6.3 took out of White_Space, what the Rust and
//   Oniguruma \s match;
// - $ is the end of the text only (PCRE2_DOLLAR_ENDONLY; PCRE2's default also matches before a
//   final newline). The text is what lies between special tokens, as in tiktoken, so $ and (?!\S)
//   see the end of that stretch;
// - invalid UTF-8 is allowed (PCRE2_MATCH_INVALID_UTF): no match covers an invalid byte, and
//   for_each_piece hands the bytes no match covers over as pieces of their own, so every byte of
//   the text is in exactly one piece (decode(encode(x)) == x for any bytes). That is also what
//   Hugging Face's Split "Isolated" does with text its regex leaves between matches.
class BpeRegex {
 public:
  // Compiles `pattern` (errors name `source`, the pattern and the offset PCRE2 points at).
  BpeRegex(std::string_view pattern, std::string source);
  ~BpeRegex();
  BpeRegex(BpeRegex&&) noexcept;
  BpeRegex& operator=(BpeRegex&&) noexcept;

  // Calls fn(piece) for each piece of `text`, in order: every match, and every stretch of bytes
  // between matches. Empty matches are skipped. The pieces concatenate to `text`.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& fn) const;

  const std::string& pattern() const { return pattern_; }  // as given

  // The pattern as PCRE2 runs it: \s -> \p{White_Space}, \S -> \P{White_Space}, outside and
  // inside character classes (Note [Pre-tokenizer regexes]); \\s and \Q...\E stay as they are.
  static std::string to_pcre2(std::string_view pattern);

 private:
  struct Impl;
  std::string pattern_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::data
