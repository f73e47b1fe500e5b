// The tokenizer interface a training program holds (`--tokenizer FILE`): encode text to ids,
// decode ids to bytes (or text: WordPiece), the vocabulary size and the ids of named tokens;
// load_tokenizer picks the implementation from the file. Leaves out: the implementations
// (data/byte_tokenizer.h, data/bpe_tokenizer.h, data/wordpiece.h) and batching or padding (a
// program's business; data/mlm.h for BERT's).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// What encode does with the text of a special token ("<|endoftext|>") found in the text, as
// tiktoken's allowed_special / disallowed_special do:
//   refuse()   (the default, tiktoken's too): an error naming the token and its byte offset;
//   allow()    each is encoded as its special id;
//   as_text()  each is ordinary text, split and merged like any other (encode_ordinary);
//   allow({"<|endoftext|>"}): those are encoded as special ids, the others refused.
// Hugging Face's tokenizers always split added tokens out of the text: allow() does the same.
struct SpecialTokens {
  enum class Mode { kRefuse, kAllow, kText };
  Mode mode = Mode::kRefuse;
  std::vector<std::string> allowed;  // with kRefuse or kText: these are special ids all the same

  static SpecialTokens refuse() { return {}; }
  static SpecialTokens allow() { return {Mode::kAllow, {}}; }
  static SpecialTokens allow(std::vector<std::string> names) {
    return {Mode::kRefuse, std::move(names)};
  }
  static SpecialTokens as_text() { return {Mode::kText, {}}; }
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // For messages and logs: what it is and where it came from ("cl100k_base (path)").
  virtual std::string name() const = 0;
  // One more than the largest id (an embedding table of this many rows covers every id).
  virtual int64_t vocab_size() const = 0;

  virtual std::vector<int32_t> encode(std::string_view text,
                                      const SpecialTokens& special) const = 0;
  std::vector<int32_t> encode(std::string_view text) const { return encode(text, {}); }
  // Special-token text is ordinary text (tiktoken's encode_ordinary).
  std::vector<int32_t> encode_ordinary(std::string_view text) const {
    return encode(text, SpecialTokens::as_text());
  }

  // The bytes of the ids, concatenated: a slice that cuts a multi-byte character gives its bytes
  // as they are (not U+FFFD), so decoded slices concatenate to the decoded whole. An id outside
  // the vocabulary is an error naming it and its position. WordPiece, whose tokens are normalized
  // text, gives that text joined as its decoder joins it instead (Note [WordPiece decoding] in
  // data/wordpiece.h).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // The ids as the tokenizer's post-processor wraps one encoded text: what Hugging Face's
  // encode(text) gives where encode here gives encode(text, add_special_tokens=False). Llama 2's
  // tokenizer.json puts <s> in front, BERT's [CLS] and [SEP] around; the byte tokenizer and
  // tiktoken files add nothing.
  virtual std::vector<int32_t> post_process(std::vector<int32_t> ids) const { return ids; }

  // The id of a special token, or of the token whose bytes are `token`; nullopt if none.
  virtual std::optional<int32_t> find_token(std::string_view token) const = 0;
  // The same, an error naming the token and the tokenizer when there is none.
  int32_t token_id(std::string_view token) const;
};

// Note [Choosing a tokenizer]
// load_tokenizer(spec) reads:
//   "bytes"                        ByteTokenizer (vocabulary 256; no file)
//   a folder                       its tokenizer.json (a Hugging Face model folder)
//   a file starting with '{'       a Hugging Face tokenizer.json: model.type "WordPiece" is
//                                  WordPieceTokenizer::from_hf_json (BERT's), any other
//                                  BpeTokenizer::from_hf_json (byte-level or SentencePiece BPE;
//                                  it refuses what it cannot read)
//   a file named *vocab.txt        a WordPiece vocab.txt (WordPieceTokenizer::from_vocab_txt),
//                                  normalized as `preset` says ("uncased": lower-cased, accents
//                                  stripped; "cased": neither), else as the tokenizer_config.json
//                                  beside it says (do_lower_case...), else uncased
//                                  (bert-base-uncased's vocab.txt alone)
//   any other file                 a tiktoken rank file (BpeTokenizer::from_tiktoken), whose preset
//                                  (regex and special tokens) is named by `preset` when given,
//                                  else by the file name (r50k_base / gpt2, cl100k_base,
//                                  o200k_base; tokenizer.model or a name with "llama3": Llama 3),
//                                  else by its number of ranks (50256, 100256, 128000, 199998).
// Errors name the file and why: missing, unreadable, a SentencePiece model (Llama 2's
// tokenizer.model, protobuf: not read), no preset to be found.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& preset = "");

}  // namespace loom::data
