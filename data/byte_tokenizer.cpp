// ByteTokenizer and text_to_shards. See byte_tokenizer.h.
#include "data/byte_tokenizer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/token_shards.h"

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

TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction) {
  namespace fs = std::filesystem;
  LOOM_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "text_to_shards: val_fraction ",
             val_fraction, " is outside [0, 1)");
  std::ifstream in(text_file, std::ios::binary);
  LOOM_CHECK(in.good(), "text_to_shards: cannot open ", text_file, ": ", std::strerror(errno));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  LOOM_CHECK(!in.bad(), "text_to_shards: cannot read ", text_file);
  const int64_t n = int64_t(text.size());
  LOOM_CHECK(n > 0, "text_to_shards: ", text_file, " is empty");

  // The split: the last round(n * val_fraction) bytes, moved back over UTF-8 continuation
  // bytes (10xxxxxx) so that no character is cut in two.
  int64_t split = n - int64_t(std::llround(double(n) * val_fraction));
  while (split > 0 && split < n && (static_cast<unsigned char>(text[size_t(split)]) & 0xC0) == 0x80)
    --split;
  LOOM_CHECK(split > 0, "text_to_shards: ", text_file, " (", n,
             " bytes) leaves no training text with val_fraction ", val_fraction);

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  LOOM_CHECK(!ec, "text_to_shards: cannot create ", out_dir, ": ", ec.message());
  const ByteTokenizer tok;
  const std::vector<uint16_t> ids = tok.encode(text);
  TextShards out;
  out.train_path = (fs::path(out_dir) / "train_000000.bin").string();
  out.val_path = (fs::path(out_dir) / "val_000000.bin").string();
  out.train_tokens = split;
  out.val_tokens = n - split;
  std::span<const uint16_t> all(ids);
  write_token_shard(out.train_path, all.first(size_t(split)));
  write_token_shard(out.val_path, all.subspan(size_t(split)));
  return out;
}

}  // namespace loom::data
