// BpeRegex (data/bpe_regex.h) on PCRE2: compile with Unicode and invalid-UTF support, JIT when the
// platform has it, and the match loop that hands out pieces. Leaves out: partial (streaming)
// matching; a text is split whole.
#include "data/bpe_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace loom::data {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// The match data (and, after a JIT stack overflow, a larger JIT stack) of one for_each_piece
// call: PCRE2 matches need their own, so one BpeRegex serves many threads at once.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() {
    if (stack) pcre2_jit_stack_free(stack);
    if (context) pcre2_match_context_free(context);
    if (data) pcre2_match_data_free(data);
  }
};

}  // namespace

struct BpeRegex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  std::string source;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
  // One match from `start`; the PCRE2 return code (> 0: matched, PCRE2_ERROR_NOMATCH: none).
  int match(std::string_view text, size_t start, MatchState& m) const;
};

std::string BpeRegex::to_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char next = pattern[++i];  // an escape: \s and \S change, any other stays as it is
    if (next == 'Q') {               // \Q...\E quotes: copied as they are
      const size_t end = pattern.find("\\E", i);
      const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
      out += '\\';
      out += pattern.substr(i, stop - i);
      i = stop - 1;
    } else if (next == 's') {
      out += "\\p{White_Space}";
    } else if (next == 'S') {
      out += "\\P{White_Space}";
    } else {
      out += '\\';
      out += next;
    }
  }
  return out;
}

BpeRegex::BpeRegex(std::string_view pattern, std::string source)
    : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  impl_->source = std::move(source);
  const std::string translated = to_pcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              options, &err, &offset, nullptr);
  LOOM_CHECK(impl_->code, impl_->source,
             ": the pre-tokenizer regex does not compile (PCRE2: ", pcre2_message(err),
             ", at offset ", offset, " of ", translated, ")");
  // Without a JIT (a platform PCRE2 has none for) pcre2_match interprets the same pattern.
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

BpeRegex::~BpeRegex() = default;
BpeRegex::BpeRegex(BpeRegex&&) noexcept = default;
BpeRegex& BpeRegex::operator=(BpeRegex&&) noexcept = default;

int BpeRegex::Impl::match(std::string_view text, size_t start, MatchState& m) const {
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  int rc = jit ? pcre2_jit_match(code, subject, text.size(), start, 0, m.data, m.context)
               : pcre2_match(code, subject, text.size(), start, 0, m.data, m.context);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m.stack) {
    // A piece that backtracks deeply (a very long run): once, with a JIT stack of up to 64 MiB.
    m.stack = pcre2_jit_stack_create(1 << 20, 64 << 20, nullptr);
    m.context = pcre2_match_context_create(nullptr);
    LOOM_CHECK(m.stack && m.context, source, ": out of memory for PCRE2's JIT stack");
    pcre2_jit_stack_assign(m.context, nullptr, m.stack);
    rc = pcre2_jit_match(code, subject, text.size(), start, 0, m.data, m.context);
  }
  LOOM_CHECK(rc > 0 || rc == PCRE2_ERROR_NOMATCH, source,
             ": the pre-tokenizer regex failed at byte ", start, " of a ", text.size(),
             "-byte text (PCRE2: ", pcre2_message(rc), ")");
  return rc;
}

void BpeRegex::for_each_piece(std::string_view text,
                              const std::function<void(std::string_view)>& fn) const {
  MatchState m;
  m.data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  LOOM_CHECK(m.data, impl_->source, ": out of memory for PCRE2's match data");
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(m.data);
  size_t covered = 0;  // text before this is handed out
  size_t start = 0;    // where the next match may begin
  while (start < text.size()) {
    if (impl_->match(text, start, m) == PCRE2_ERROR_NOMATCH) break;
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // an empty match: look again one character on
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80)
        ++start;
      continue;
    }
    if (begin > covered) fn(text.substr(covered, begin - covered));
    fn(text.substr(begin, end - begin));
    covered = start = end;
  }
  if (covered < text.size()) fn(text.substr(covered));
}

}  // namespace loom::data
