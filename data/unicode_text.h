// Unicode for the tokenizers: UTF-8 to code points and back (invalid bytes as U+FFFD), the general
// categories WordPiece asks about, canonical decomposition (NFD) and full lower-casing, and NFC
// for byte-level BPE's normalizer (Qwen2's), from utf8proc's tables (Unicode 15 in Debian 12's
// libutf8proc). Leaves out: compatibility forms (NFKC, NFKD), case folding, grapheme clusters,
// and BERT's own rules built on these (data/wordpiece_normalizer.h).
#pragma once

#include <string>
#include <string_view>

namespace loom::data {

// Appends the code points of `text` to `out`. Invalid UTF-8 becomes U+FFFD, one per maximal
// subpart of an ill-formed sequence (Unicode's recommended practice; what Python's
// decode("utf-8", "replace") and Rust's String::from_utf8_lossy do): a truncated sequence is one
// U+FFFD, a byte that starts none (0x80-0xC1, 0xF5-0xFF) one each.
void decode_utf8(std::string_view text, std::u32string& out);
// Appends the UTF-8 bytes of `c` (a code point below 0x110000, not a surrogate).
void append_utf8(char32_t c, std::string& out);
std::string encode_utf8(std::u32string_view text);

// Unicode's White_Space property (Rust's char::is_whitespace): tab to carriage return, space,
// U+0085, and the separators Zs, Zl, Zp (U+00A0, U+3000, U+2028, ...).
bool is_white_space(char32_t c);
// General category Cc, Cf, Co or Cs (control, format, private use, surrogate). Unassigned code
// points (Cn) are not.
bool is_other(char32_t c);
bool is_punctuation(char32_t c);      // general category P* (Pc Pd Ps Pe Pi Pf Po)
bool is_nonspacing_mark(char32_t c);  // general category Mn

// Appends the canonical decomposition (NFD) of `text`: each code point's full canonical
// decomposition (Hangul syllables into jamo), then combining marks reordered by their canonical
// combining class.
void append_nfd(std::u32string_view text, std::u32string& out);
// The canonical composition (NFC) of UTF-8 text: decomposed, reordered, then composed ("e" +
// U+0301 -> U+00E9). Text that is not valid UTF-8 is returned unchanged.
std::string nfc(std::string_view text);
// Appends the full lowercase mapping of `c` (UnicodeData's simple mapping, and SpecialCasing's
// one unconditional multi-character entry: U+0130 -> U+0069 U+0307); context-free, so a final
// capital sigma becomes U+03C3, as Rust's char::to_lowercase gives.
void append_lowercase(char32_t c, std::u32string& out);

// "U+00E9": for messages.
std::string code_point_name(char32_t c);

// The Unicode version of the tables (utf8proc_unicode_version(), "15.0.0").
const char* unicode_version();

}  // namespace loom::data
