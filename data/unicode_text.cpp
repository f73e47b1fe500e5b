// The Unicode helpers of data/unicode_text.h: a UTF-8 decoder written out (it is the format, not a
// table), and utf8proc for every property, decomposition and case mapping. ASCII takes a fast path
// in each: it has no decomposition, no marks, and its categories are fixed.
// nfc is utf8proc's whole-string map; the rest works on code points loom has decoded itself.
#include "data/unicode_text.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace loom::data {

namespace {

constexpr char32_t kReplacement = 0xFFFD;

utf8proc_category_t category(char32_t c) { return utf8proc_category(utf8proc_int32_t(c)); }

int combining_class(char32_t c) {
  return c < 0x300 ? 0 : int(utf8proc_get_property(utf8proc_int32_t(c))->combining_class);
}

// Unicode's canonical ordering: each run of marks with a nonzero combining class, stably sorted by
// that class.
void canonical_order(std::u32string& s, size_t from) {
  size_t i = from;
  while (i < s.size()) {
    if (combining_class(s[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < s.size() && combining_class(s[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(
          s.begin() + std::ptrdiff_t(i), s.begin() + std::ptrdiff_t(j),
          [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

}  // namespace

void decode_utf8(std::string_view text, std::u32string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char b = p[i];
    if (b < 0x80) {
      out += char32_t(b);
      ++i;
      continue;
    }
    // The sequence's length and the range its second byte must be in (no overlong forms, no
    // surrogates, nothing above U+10FFFF).
    size_t len = 0;
    char32_t cp = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2, cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, cp = b & 0x0F;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, cp = b & 0x07;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out += kReplacement;
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k < len && i + k < n; ++k) {
      const unsigned char c = p[i + k];
      if (c < lo || c > hi) break;
      lo = 0x80, hi = 0xBF;
      cp = (cp << 6) | (c & 0x3F);
    }
    out += k == len ? cp : kReplacement;  // a maximal subpart of an ill-formed sequence: one U+FFFD
    i += k;
  }
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(c, out);
  return out;
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= '\t' && c <= '\r');
  if (c == 0x85) return true;
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_other(char32_t c) {
  if (c < 0x80) return c < 0x20 || c == 0x7F;
  const utf8proc_category_t cat = category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
}

bool is_punctuation(char32_t c) {
  const utf8proc_category_t cat = category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_nonspacing_mark(char32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

void append_nfd(std::u32string_view text, std::u32string& out) {
  const size_t start = out.size();
  constexpr utf8proc_ssize_t kMax = 32;  // the longest canonical decomposition is 4 code points
  utf8proc_int32_t buf[kMax];
  for (char32_t c : text) {
    if (c < 0xC0) {  // nothing below U+00C0 decomposes
      out += c;
      continue;
    }
    const utf8proc_ssize_t n =
        utf8proc_decompose_char(utf8proc_int32_t(c), buf, kMax, UTF8PROC_DECOMPOSE, nullptr);
    LOOM_CHECK(n >= 0 && n <= kMax, "append_nfd: utf8proc cannot decompose ", code_point_name(c),
               " (", n < 0 ? utf8proc_errmsg(n) : "too long", ")");
    for (utf8proc_ssize_t k = 0; k < n; ++k) out += char32_t(buf[k]);
  }
  canonical_order(out, start);
}

void append_lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out += c >= 'A' && c <= 'Z' ? c + 32 : c;
  } else if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE: i + COMBINING DOT ABOVE
    out += U'i';
    out += char32_t(0x307);
  } else {
    out += char32_t(utf8proc_tolower(utf8proc_int32_t(c)));
  }
}

std::string code_point_name(char32_t c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", unsigned(c));
  return buf;
}

const char* unicode_version() { return utf8proc_unicode_version(); }

std::string nfc(std::string_view text) {
  const bool ascii = std::all_of(text.begin(), text.end(), [](char c) { return (c & 0x80) == 0; });
  if (ascii) return std::string(text);  // ASCII is its own NFC
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          utf8proc_ssize_t(text.size()), &out,
                                          utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(text);  // not valid UTF-8: unchanged
  std::string result(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return result;
}

}  // namespace loom::data
