// text_to_shards. See text_shards.h.
#include "data/text_shards.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/token_shards.h"

namespace loom::data {

namespace {
std::string read_text(const std::string& text_file) {
  std::ifstream in(text_file, std::ios::binary);
  LOOM_CHECK(in.good(), "text_to_shards: cannot open ", text_file, ": ", std::strerror(errno));
  std::string text(std::istreambuf_iterator<char>(in), {});
  LOOM_CHECK(!in.bad(), "text_to_shards: cannot read ", text_file);
  LOOM_CHECK(!text.empty(), "text_to_shards: ", text_file, " is empty");
  return text;
}

// `text`'s ids as a uint16 shard at `path`; returns how many.
int64_t write_encoded(const std::string& path, std::string_view text, const Tokenizer& tok) {
  const std::vector<int32_t> ids = tok.encode_ordinary(text);
  write_token_shard(path, std::vector<uint16_t>(ids.begin(), ids.end()));
  return int64_t(ids.size());
}
}  // namespace

TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction, const Tokenizer& tok) {
  namespace fs = std::filesystem;
  LOOM_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "text_to_shards: val_fraction ",
             val_fraction, " is outside [0, 1)");
  LOOM_CHECK(tok.vocab_size() <= 65536, "text_to_shards: the tokenizer ", tok.name(), " has ",
             tok.vocab_size(), " ids; the shards hold uint16 tokens (at most 65536 ids)");
  const std::string text = read_text(text_file);
  const int64_t n = int64_t(text.size());
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
  TextShards out;
  out.train_path = (fs::path(out_dir) / "train_000000.bin").string();
  out.val_path = (fs::path(out_dir) / "val_000000.bin").string();
  const std::string_view all(text);
  out.train_tokens = write_encoded(out.train_path, all.substr(0, size_t(split)), tok);
  out.val_tokens = write_encoded(out.val_path, all.substr(size_t(split)), tok);
  return out;
}

TextShards text_to_shards(const std::string& text_file, const std::string& out_dir,
                          double val_fraction) {
  return text_to_shards(text_file, out_dir, val_fraction, ByteTokenizer());
}

}  // namespace loom::data
