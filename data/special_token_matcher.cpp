// SpecialTokenMatcher (data/special_token_matcher.h): a list per first byte, longest first, and a
// scan of the text. Leaves out: Aho-Corasick (tokenizers have a handful of special tokens; Llama
// 3's 256 share their first byte "<", and the scan compares only where "<" occurs).
#include "data/special_token_matcher.h"

#include <algorithm>

#include "core/error.h"

namespace loom::data {

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<std::pair<std::string, int32_t>> tokens,
                                         const std::string& owner)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const auto& [text, id] = tokens_[i];
    LOOM_CHECK(!text.empty() && id >= 0, owner, ": special token \"", text, "\" with id ", id,
               " (a special token needs text and an id >= 0)");
    by_byte_[static_cast<unsigned char>(text[0])].push_back(uint32_t(i));
  }
  for (auto& list : by_byte_)
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return tokens_[a].first.size() > tokens_[b].first.size();
    });
}

std::optional<int32_t> SpecialTokenMatcher::find(std::string_view text) const {
  for (const auto& [t, id] : tokens_)
    if (t == text) return id;
  return std::nullopt;
}

std::pair<size_t, size_t> SpecialTokenMatcher::next(std::string_view text, size_t from,
                                                    const std::vector<char>& allowed) const {
  for (size_t i = from; i < text.size(); ++i) {
    for (uint32_t s : by_byte_[static_cast<unsigned char>(text[i])]) {
      const std::string& t = tokens_[s].first;
      if (allowed[s] && text.compare(i, t.size(), t) == 0) return {i, s};
    }
  }
  return {std::string_view::npos, 0};
}

// Which tokens are cut out of `text`; with refuse(), first an error for any other found in it
// (tiktoken checks the whole text the same way before encoding).
std::vector<char> SpecialTokenMatcher::allowed(std::string_view text, const SpecialTokens& special,
                                               const std::string& owner) const {
  using Mode = SpecialTokens::Mode;
  std::vector<char> allowed(tokens_.size(), special.mode == Mode::kAllow);
  for (const std::string& want : special.allowed) {
    auto it = std::find_if(tokens_.begin(), tokens_.end(),
                           [&](const auto& s) { return s.first == want; });
    LOOM_CHECK(it != tokens_.end(), owner, ": \"", want, "\" is not a special token of it");
    allowed[size_t(it - tokens_.begin())] = 1;
  }
  if (special.mode == Mode::kRefuse) {
    std::vector<char> refused(allowed.size());
    for (size_t i = 0; i < allowed.size(); ++i) refused[i] = !allowed[i];
    auto [at, s] = next(text, 0, refused);
    LOOM_CHECK(at == std::string_view::npos, owner, ": the text holds the special token \"",
               tokens_[s].first, "\" at byte ", at,
               ", which is not allowed (encode with SpecialTokens::allow() to encode it as id ",
               tokens_[s].second, ", or SpecialTokens::as_text() to encode it as text)");
  }
  return allowed;
}

void SpecialTokenMatcher::split(std::string_view text, const SpecialTokens& special,
                                const std::string& owner,
                                const std::function<void(std::string_view)>& on_text,
                                const std::function<void(int32_t)>& on_special) const {
  const std::vector<char> ok = allowed(text, special, owner);
  const bool any = std::find(ok.begin(), ok.end(), 1) != ok.end();
  size_t pos = 0;
  while (any) {
    auto [at, s] = next(text, pos, ok);
    if (at == std::string_view::npos) break;
    on_text(text.substr(pos, at - pos));
    on_special(tokens_[s].second);
    pos = at + tokens_[s].first.size();
  }
  on_text(text.substr(pos));
}

}  // namespace loom::data
