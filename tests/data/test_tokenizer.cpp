// data/tokenizer: load_tokenizer's choice (Note [Choosing a tokenizer]): "bytes", a
// tokenizer.json by its content (BPE or WordPiece), a model folder by its tokenizer.json, a
// vocab.txt by its name (cased as told), a rank file's preset by its name, by its size, or as
// named; its refusals; ByteTokenizer through the interface.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/tokenizer.h"
#include "data/wordpiece.h"
#include "support/errors.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

using loom::test::error_of;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

// The committed cl100k subset under another name (its highest rank is 100255, so its size
// is 100256 ranks, cl100k's).
std::string subset_as(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  std::filesystem::copy_file(fixture("cl100k_subset.tiktoken"), path);
  return path;
}

}  // namespace

TEST(LoadTokenizer, BytesIsTheByteTokenizer) {
  auto tok = load_tokenizer("bytes");
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->encode_ordinary("\xC3\xA9!"), (std::vector<int32_t>{195, 169, 33}));
  EXPECT_EQ(tok->decode(std::vector<int32_t>{104, 105}), "hi");
  EXPECT_EQ(tok->token_id("A"), 65);
  EXPECT_FALSE(tok->find_token("<|endoftext|>").has_value());
  std::string e = error_of([&] { tok->decode(std::vector<int32_t>{104, 256}); });
  EXPECT_NE(e.find("token 256 at position 1 is outside the byte vocabulary"), std::string::npos)
      << e;
  e = error_of([&] { tok->token_id("<|endoftext|>"); });
  EXPECT_NE(e.find("bytes: has no token \"<|endoftext|>\""), std::string::npos) << e;
}

TEST(LoadTokenizer, ATokenizerJsonByItsContent) {
  TempDir dir;
  const std::string path = dir.file("vocab.bin");  // the name says nothing
  std::filesystem::copy_file(fixture("kjv_bpe.json"), path);
  auto tok = load_tokenizer(path);
  EXPECT_EQ(tok->name(), "tokenizer.json (" + path + ")");
  EXPECT_EQ(tok->vocab_size(), 1002);
  EXPECT_EQ(tok->token_id("<|begin_of_text|>"), 1000);
  std::string e = error_of([&] { load_tokenizer(path, "cl100k_base"); });
  EXPECT_NE(e.find("is a tokenizer.json, which names its own normalizer, regex and special tokens"),
            std::string::npos)
      << e;
}

// A Hugging Face model folder is read through its tokenizer.json (Llama 2's layout here); the
// post-processor puts <s> in front.
TEST(LoadTokenizer, AModelFolderByItsTokenizerJson) {
  TempDir dir;
  std::filesystem::copy_file(fixture("llama2_style.json"), dir.file("tokenizer.json"));
  auto tok = load_tokenizer(dir.path);
  EXPECT_EQ(tok->name(), "tokenizer.json (" + dir.file("tokenizer.json") + ")");
  EXPECT_EQ(tok->token_id("<s>"), 1);
  const std::vector<int32_t> ids = tok->encode("In the beginning");
  EXPECT_EQ(tok->decode(ids), "In the beginning");
  EXPECT_EQ(tok->post_process(ids).front(), 1);
  EXPECT_EQ(tok->post_process(ids).size(), ids.size() + 1);
}

// model.type WordPiece is BERT's tokenizer, whatever the file is called.
TEST(LoadTokenizer, AWordPieceTokenizerJsonByItsModelType) {
  TempDir dir;
  const std::string path = dir.file("tokenizer.bin");
  std::filesystem::copy_file(fixture("kjv_wordpiece.json"), path);
  auto tok = load_tokenizer(path);
  ASSERT_NE(dynamic_cast<const WordPieceTokenizer*>(tok.get()), nullptr);
  EXPECT_EQ(tok->name(), "tokenizer.json (" + path + ")");
  EXPECT_EQ(tok->vocab_size(), 3000);
  EXPECT_EQ(tok->decode(tok->encode("In the Beginning")), "in the beginning");  // uncased
  std::string e = error_of([&] { load_tokenizer(path, "uncased"); });
  EXPECT_NE(e.find("is a tokenizer.json, which names its own normalizer"), std::string::npos) << e;
}

// A vocab.txt: uncased unless the preset or a tokenizer_config.json beside it says otherwise.
TEST(LoadTokenizer, AVocabTxtByItsNameCasedAsToldOrAsItsConfigSays) {
  TempDir dir;
  const std::string path = dir.file("bert-vocab.txt");
  std::filesystem::copy_file(fixture("kjv_wordpiece_vocab.txt"), path);
  const std::vector<int32_t> lower = load_tokenizer(path)->encode("god");
  ASSERT_EQ(lower.size(), 1u);
  EXPECT_EQ(load_tokenizer(path)->encode("God"), lower);
  EXPECT_EQ(load_tokenizer(path, "uncased")->encode("God"), lower);
  EXPECT_NE(load_tokenizer(path, "cased")->encode("God"), lower);  // [UNK]: an uncased vocabulary
  EXPECT_EQ(load_tokenizer(path)->name(), "vocab.txt (" + path + ")");
  loom::test::write_bytes(dir.file("tokenizer_config.json"), R"({"do_lower_case": false})");
  EXPECT_NE(load_tokenizer(path)->encode("God"), lower);
  EXPECT_EQ(load_tokenizer(path, "uncased")->encode("God"), lower);  // the preset first
  std::string e = error_of([&] { load_tokenizer(path, "cl100k_base"); });
  EXPECT_NE(e.find("is a WordPiece vocab.txt, whose presets are \"uncased\""), std::string::npos)
      << e;
  loom::test::write_bytes(dir.file("tokenizer_config.json"), R"({"do_lower_case": "no"})");
  e = error_of([&] { load_tokenizer(path); });
  EXPECT_NE(e.find("tokenizer_config.json " + dir.file("tokenizer_config.json")), std::string::npos)
      << e;
}

TEST(LoadTokenizer, ARankFilesPresetByNameSizeOrAsNamed) {
  TempDir dir;
  auto by_name = load_tokenizer(subset_as(dir, "cl100k_base.tiktoken"));
  EXPECT_EQ(by_name->token_id("<|endoftext|>"), 100257);
  auto llama = load_tokenizer(subset_as(dir, "tokenizer.model"));  // Llama 3's file name
  EXPECT_EQ(llama->token_id("<|begin_of_text|>"), 100256);         // numbered from its size
  EXPECT_EQ(llama->token_id("<|eot_id|>"), 100265);
  EXPECT_EQ(llama->vocab_size(), 100256 + 256);
  auto by_size = load_tokenizer(subset_as(dir, "ranks.txt"));
  EXPECT_EQ(by_size->name(), "cl100k_base (" + dir.file("ranks.txt") + ")");
  auto named = load_tokenizer(dir.file("ranks.txt"), "r50k");
  EXPECT_EQ(named->name(), "r50k_base (" + dir.file("ranks.txt") + ")");
  EXPECT_EQ(named->token_id("<|endoftext|>"), 50256);
  // The same text, another regex: GPT-2's contractions are lower case only, cl100k's any case.
  EXPECT_EQ(named->encode("I'M"), (std::vector<int32_t>{40, 6, 44}));    // I ' M
  EXPECT_EQ(by_size->encode("I'M"), (std::vector<int32_t>{40, 28703}));  // I 'M
}

TEST(LoadTokenizer, RefusalsNameTheFile) {
  TempDir dir;
  loom::test::write_bytes(dir.file("mine.tiktoken"), "YQ== 0\nYg== 1\n");
  std::string e = error_of([&] { load_tokenizer(dir.file("mine.tiktoken")); });
  EXPECT_NE(e.find(dir.file("mine.tiktoken") + " is a tiktoken rank file of 2 ranks whose name and "
                                               "size say no preset"),
            std::string::npos)
      << e;
  e = error_of([&] { load_tokenizer(dir.file("mine.tiktoken"), "p50k"); });
  EXPECT_NE(e.find("BPE preset \"p50k\" is not one of r50k_base (gpt2), cl100k_base"),
            std::string::npos)
      << e;
  e = error_of([&] { load_tokenizer(dir.file("missing.json")); });
  EXPECT_NE(e.find(dir.file("missing.json") + " is not a file"), std::string::npos) << e;
  e = error_of([&] { load_tokenizer(dir.path); });
  EXPECT_NE(e.find("the folder " + dir.path + " has no tokenizer.json"), std::string::npos) << e;
  e = error_of([&] { load_tokenizer("bytes", "cl100k_base"); });
  EXPECT_NE(e.find("the byte tokenizer has no preset"), std::string::npos) << e;
}

// ByteTokenizer keeps its uint16 encode/decode beside the interface's int32 ones.
TEST(LoadTokenizer, ByteTokenizerBothWays) {
  ByteTokenizer bytes;
  const Tokenizer& tok = bytes;
  EXPECT_EQ(bytes.encode("hi"), (std::vector<uint16_t>{104, 105}));
  EXPECT_EQ(tok.encode("hi"), (std::vector<int32_t>{104, 105}));
  EXPECT_EQ(tok.encode("<|endoftext|>", SpecialTokens::allow()).size(), 13u);
  EXPECT_EQ(bytes.decode(std::vector<uint16_t>{104, 105}), "hi");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{104, 105}), "hi");
  std::string e = error_of([&] { tok.decode(std::vector<int32_t>{-1}); });
  EXPECT_NE(e.find("token -1 at position 0 is outside the byte vocabulary"), std::string::npos)
      << e;
}
