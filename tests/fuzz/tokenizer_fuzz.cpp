// libFuzzer harness: the BPE tokenizers (data/bpe_tokenizer.h) on arbitrary text, bytes that are
// not UTF-8 included. The first input byte picks one of four committed tokenizer.json files; the
// rest is the text. Each must encode without crashing, with every id inside the vocabulary, and
// decode back to the text as the tokenizer's kind says: byte-level exactly (kjv_bpe.json), after
// NFC (qwen2_style.json), with each "▁" read as the space it stands for (llama2_style.json, a
// SentencePiece BPE with byte fallback); metaspace_unk.json (unknown characters are <unk>) only
// round-trips ids. Special-token text is ordinary text here (encode_ordinary); the same text with
// special tokens allowed must encode too. Leaves out: parsing tokenizer.json itself (the reader's
// tests, tests/data/test_hf_tokenizer_json*.cpp, refuse malformed files field by field).
#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/unicode_text.h"

namespace {

const char* const kFiles[] = {"kjv_bpe.json", "qwen2_style.json", "llama2_style.json",
                              "metaspace_unk.json"};

const loom::data::BpeTokenizer& tokenizer(size_t which) {
  static std::array<std::unique_ptr<loom::data::BpeTokenizer>, 4> loaded;
  if (!loaded[which])
    loaded[which] =
        std::make_unique<loom::data::BpeTokenizer>(loom::data::BpeTokenizer::from_hf_json(
            std::string(LOOM_TOKENIZER_FIXTURES) + "/" + kFiles[which]));
  return *loaded[which];
}

std::string replace_marks(const std::string& s) {  // "▁" -> " "
  const std::string mark = "\u2581";
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const bool at_mark = s.compare(i, mark.size(), mark) == 0;
    out += at_mark ? ' ' : s[i];
    i += at_mark ? mark.size() : 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t which = data[0] % 4;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const loom::data::BpeTokenizer& tok = tokenizer(which);
  const std::vector<int32_t> ids = tok.encode_ordinary(text);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  const std::string back = tok.decode(ids);
  const std::string want = which == 0   ? text
                           : which == 1 ? loom::data::nfc(text)
                           : which == 2 ? replace_marks(text)
                                        : back;
  if (back != want) std::abort();
  try {
    tok.encode(text, loom::data::SpecialTokens::allow());
  } catch (const loom::Error&) {
    std::abort();  // allow() refuses nothing
  }
  return 0;
}
