// tokenize_shards: tokenizes a text file with a BPE or WordPiece tokenizer (a tiktoken rank file, a
// Hugging Face tokenizer.json or a vocab.txt: data/tokenizer.h) and writes llm.c's .bin token
// shards (data/token_shards.h), which train_gpt --shards reads. Leaves out: several threads (one
// encodes; docs/tokenizers.md has its speed), documents and their separators (the file is one
// text), and uint32 shards: llm.c's format holds uint16 tokens, so a vocabulary over 65536 ids
// (cl100k, Llama 3) is refused, but for --count-only (encode, print the count and the speed, write
// nothing).
//
//   ./build/examples/tokenize_shards --tokenizer tokenizer.json --input $(scripts/gpt-corpus.sh)
//       --out .data/kjv-bpe                          # (one line) train_000000.bin, val_000000.bin
//   ./build/examples/train_gpt --shards .data/kjv-bpe --vocab-size 1002 ...
//   ./build/examples/tokenize_shards --tokenizer cl100k_base.tiktoken --input kjv.txt --count-only
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"

using namespace loom;

namespace {

struct Flags {
  std::string tokenizer, preset, input, out, special = "refuse";
  bool count_only = false;
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;  // llm.c's shards hold 100M tokens
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "tokenize_shards: cannot open --input ", path);
  std::string text(std::istreambuf_iterator<char>(in), {});
  LOOM_CHECK(!in.bad(), "tokenize_shards: cannot read --input ", path);
  return text;
}

// Writes `ids` as <out>/<split>_000000.bin, _000001.bin, ... of at most shard_tokens each.
int64_t write_shards(std::span<const int32_t> ids, const Flags& f, const char* split) {
  int64_t shards = 0;
  std::vector<uint16_t> buf;
  for (size_t pos = 0; pos < ids.size(); pos += size_t(f.shard_tokens), ++shards) {
    auto part = ids.subspan(pos, std::min(ids.size() - pos, size_t(f.shard_tokens)));
    buf.assign(part.begin(), part.end());  // ids < 65536: checked against the vocabulary
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06ld.bin", split, long(shards));
    data::write_token_shard((std::filesystem::path(f.out) / name).string(), buf);
  }
  return shards;
}

// Encodes --input; prints the count and the speed; writes the shards unless --count-only.
int run(const Flags& f) {
  auto tok = data::load_tokenizer(f.tokenizer, f.preset);
  LOOM_CHECK(f.count_only || tok->vocab_size() <= 65536, "tokenize_shards: ", tok->name(), " has ",
             tok->vocab_size(), " ids, but llm.c's .bin shards hold uint16 tokens (ids up ",
             "to 65535; data/token_shards.h), and loom reads no uint32 shards");
  LOOM_CHECK(f.count_only || !f.out.empty(),
             "tokenize_shards: --out is required (or --count-only)");
  const std::string text = read_text(f.input);
  const data::SpecialTokens special = f.special == "allow"  ? data::SpecialTokens::allow()
                                      : f.special == "text" ? data::SpecialTokens::as_text()
                                                            : data::SpecialTokens::refuse();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok->encode(text, special);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  LOOM_CHECK(!ids.empty(), "tokenize_shards: --input ", f.input, " is empty");
  std::printf("%s: %zu bytes -> %zu tokens (%.2f bytes/token) in %.3f s, %.1f MB/s on one thread\n",
              tok->name().c_str(), text.size(), ids.size(),
              double(text.size()) / double(ids.size()), secs, double(text.size()) / secs / 1e6);
  if (f.count_only) return 0;
  // The last val_fraction of the tokens validates (at least one token trains).
  const size_t n_val = std::min(ids.size() - 1, size_t(double(ids.size()) * f.val_fraction + 0.5));
  const std::span<const int32_t> all(ids);
  std::filesystem::create_directories(f.out);
  const int64_t n_train = write_shards(all.first(ids.size() - n_val), f, "train");
  const int64_t n_val_shards = n_val ? write_shards(all.last(n_val), f, "val") : 0;
  std::printf(
      "%s: %ld train shard(s), %ld val shard(s) (%zu tokens); train with --shards %s "
      "--vocab-size %ld\n",
      f.out.c_str(), long(n_train), long(n_val_shards), n_val, f.out.c_str(),
      long(tok->vocab_size()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenize a text file into llm.c .bin shards with a BPE or WordPiece tokenizer"};
  Flags f;
  app.add_option("--tokenizer", f.tokenizer,
                 "a tokenizer.json (BPE or WordPiece), a tiktoken rank file (cl100k_base.tiktoken, "
                 "Llama 3's tokenizer.model), a WordPiece vocab.txt, or \"bytes\"")
      ->required();
  app.add_option("--preset", f.preset,
                 "a tiktoken file's regex and special tokens: r50k_base, cl100k_base, o200k_base, "
                 "llama3 (default: from its name or size); a vocab.txt's case: uncased, cased");
  app.add_option("--input", f.input, "the UTF-8 text file to tokenize")->required();
  app.add_option("--out", f.out, "the folder of the shards (created)");
  app.add_flag("--count-only", f.count_only,
               "encode, print the token count and the speed, write nothing (any vocabulary)");
  app.add_option("--special", f.special,
                 "special-token text in the input: refuse (an error), allow (their ids), text "
                 "(ordinary text)")
      ->check(CLI::IsMember({"refuse", "allow", "text"}));
  app.add_option("--val-fraction", f.val_fraction, "the last fraction of the tokens validates")
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--shard-tokens", f.shard_tokens, "tokens per shard at most")
      ->check(CLI::Range(int64_t(1), int64_t(INT32_MAX)));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(f);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
