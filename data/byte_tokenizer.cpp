// ByteTokenizer. See byte_tokenizer.h.
#include "data/byte_tokenizer.h"

#include "core/error.h"

namespace loom::data {

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint16_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, const SpecialTokens&) const {
  std::vector<int32_t> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && ids[i] < kVocabSize, "ByteTokenizer::decode: token ", ids[i],
               " at position ", i, " is outside the byte vocabulary [0, ", kVocabSize, ")");
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

std::optional<int32_t> ByteTokenizer::find_token(std::string_view token) const {
  if (token.size() != 1) return std::nullopt;
  return static_cast<unsigned char>(token[0]);
}

std::string ByteTokenizer::decode(std::span<const uint16_t> tokens) const {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(tokens[i] < kVocabSize, "ByteTokenizer::decode: token ", tokens[i], " at position ",
               i, " is outside the byte vocabulary [0, ", kVocabSize, ")");
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

}  // namespace loom::data
