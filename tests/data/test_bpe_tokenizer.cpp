// data/bpe_tokenizer: special tokens allowed, refused (the error names the token and its offset)
// and as text, as tiktoken's allowed_special / disallowed_special; the longest special token wins;
// decode(encode(x)) == x for any bytes, invalid UTF-8 included, with the invalid bytes their own
// pieces; decode's errors; token ids; the constructor's checks; one tokenizer on many threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "support/errors.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

const BpeTokenizer& cl100k() {
  static const BpeTokenizer tok =
      BpeTokenizer::from_tiktoken(fixture("cl100k_subset.tiktoken"), BpePreset::kCl100k);
  return tok;
}

std::vector<int32_t> concat(std::vector<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every byte a token, "ab" and "abc" merged tokens, two special tokens of which one is a prefix
// of the other; no regex (a text is one piece).
BpeModel tiny_model() {
  BpeModel m;
  m.name = "tiny", m.source = "test";
  for (int b = 0; b < 256; ++b) m.tokens.push_back(std::string(1, char(b)));
  m.tokens.push_back("ab");   // 256
  m.tokens.push_back("abc");  // 257
  m.specials = {{"<s>", 300}, {"<s>x", 301}};
  return m;
}

}  // namespace

TEST(BpeTokenizer, SpecialTokensAreRefusedByDefaultNamingTokenAndOffset) {
  const std::string text = "Hello <|endoftext|> world";
  std::string e = error_of([&] { cl100k().encode(text); });
  EXPECT_NE(e.find("the special token \"<|endoftext|>\" at byte 6, which is not allowed"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("cl100k_base ("), std::string::npos) << e;
}

TEST(BpeTokenizer, SpecialTokensAllowedAreTheirIdsAsTextAreOrdinary) {
  const BpeTokenizer& tok = cl100k();
  const std::string text = "Hello<|endoftext|> world<|endofprompt|>";
  const std::vector<int32_t> allowed = tok.encode(text, SpecialTokens::allow());
  EXPECT_EQ(allowed, concat({tok.encode("Hello"), {100257}, tok.encode(" world"), {100276}}));
  const std::vector<int32_t> plain = tok.encode_ordinary(text);
  EXPECT_EQ(plain, tok.encode(text, SpecialTokens::as_text()));
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 100257), 0);
  EXPECT_GT(plain.size(), allowed.size());
  EXPECT_EQ(tok.decode(allowed), text);
  EXPECT_EQ(tok.decode(plain), text);
}

TEST(BpeTokenizer, SomeSpecialTokensAllowedTheOthersRefusedOrText) {
  const BpeTokenizer& tok = cl100k();
  const std::string text = "a<|endoftext|>b<|fim_prefix|>c";
  std::string e = error_of([&] { tok.encode(text, SpecialTokens::allow({"<|endoftext|>"})); });
  EXPECT_NE(e.find("\"<|fim_prefix|>\" at byte 15"), std::string::npos) << e;
  SpecialTokens some_as_text{SpecialTokens::Mode::kText, {"<|endoftext|>"}};
  EXPECT_EQ(tok.encode(text, some_as_text),
            concat({tok.encode("a"), {100257}, tok.encode_ordinary("b<|fim_prefix|>c")}));
  e = error_of([&] { tok.encode("x", SpecialTokens::allow({"<|nope|>"})); });
  EXPECT_NE(e.find("\"<|nope|>\" is not a special token of it"), std::string::npos) << e;
}

TEST(BpeTokenizer, TheLongestSpecialTokenAtTheLeftmostPlaceWins) {
  const BpeTokenizer tok(tiny_model());
  EXPECT_EQ(tok.encode("a<s>xc<s>", SpecialTokens::allow()),
            (std::vector<int32_t>{'a', 301, 'c', 300}));
  EXPECT_EQ(tok.encode("abc<s", SpecialTokens::allow()), (std::vector<int32_t>{257, '<', 's'}));
}

TEST(BpeTokenizer, AnyBytesRoundTripInvalidUtf8Included) {
  const BpeTokenizer hf = BpeTokenizer::from_hf_json(fixture("kjv_bpe.json"));
  std::mt19937 rng(7);
  const std::vector<std::string> bits = {
      "a",    " the", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x99\x82",
      "\xFF", "\xC3", "\x80\x80", "  ",           "\n",
      "'s",   "123",  "\0"};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int n = int(rng() % 40);
    for (int i = 0; i < n; ++i)
      text += rng() % 4 ? bits[rng() % bits.size()] : std::string(1, char(rng() % 256));
    for (const BpeTokenizer* tok : {&cl100k(), &hf})
      ASSERT_EQ(tok->decode(tok->encode_ordinary(text)), text) << tok->name() << " round " << round;
  }
}

// Bytes no regex match covers (invalid UTF-8) are pieces of their own, merged among themselves.
TEST(BpeTokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  const BpeTokenizer& tok = cl100k();
  const std::vector<int32_t> ids = tok.encode_ordinary(
      "ab\xFF\xFE"
      "cd");
  EXPECT_EQ(
      ids,
      concat({tok.encode("ab"), {tok.token_id("\xFF"), tok.token_id("\xFE")}, tok.encode("cd")}));
}

TEST(BpeTokenizer, DecodeNamesIdsOutsideTheVocabularyOrWithoutToken) {
  const BpeTokenizer& tok = cl100k();
  std::string e = error_of([&] { tok.decode(std::vector<int32_t>{9906, 100277}); });
  EXPECT_NE(e.find("cannot decode id 100277 at position 1: outside the vocabulary [0, 100277)"),
            std::string::npos)
      << e;
  e = error_of([&] { tok.decode(std::vector<int32_t>{-3}); });
  EXPECT_NE(e.find("cannot decode id -3 at position 0"), std::string::npos) << e;
  // 100256 is between the last rank (100255) and the first special token (100257).
  e = error_of([&] { tok.decode(std::vector<int32_t>{100256}); });
  EXPECT_NE(e.find("cannot decode id 100256 at position 0: no token has that id"),
            std::string::npos)
      << e;
}

TEST(BpeTokenizer, TokenIdsOfSpecialAndOrdinaryTokens) {
  const BpeTokenizer& tok = cl100k();
  EXPECT_EQ(tok.vocab_size(), 100277);
  EXPECT_EQ(tok.token_id("<|endoftext|>"), 100257);
  EXPECT_EQ(tok.token_id("<|endofprompt|>"), 100276);
  EXPECT_EQ(tok.token_id("Hello"), 9906);  // tiktoken: cl100k_base.encode("Hello") == [9906]
  EXPECT_EQ(tok.token_bytes(9906), "Hello");
  EXPECT_FALSE(tok.find_token("<|nope|>").has_value());
  std::string e = error_of([&] { tok.token_id("<|nope|>"); });
  EXPECT_NE(e.find("has no token \"<|nope|>\""), std::string::npos) << e;
}

TEST(BpeTokenizer, TheConstructorChecksItsModel) {
  BpeModel m = tiny_model();
  m.specials.push_back({"<t>", 65});  // 65 is "A"
  std::string e = error_of([&] { (void)BpeTokenizer(m); });
  EXPECT_NE(
      e.find("tiny (test): special token \"<t>\" has id 65, which is the ordinary token \"A\""),
      std::string::npos)
      << e;
  m = tiny_model();
  m.tokens.push_back("ab");  // 258, the bytes of 256 again
  e = error_of([&] { (void)BpeTokenizer(m); });
  EXPECT_NE(e.find("tokens 256 and 258 have the same bytes \"ab\""), std::string::npos) << e;
  m = tiny_model();
  m.pattern = "(unclosed";
  e = error_of([&] { (void)BpeTokenizer(m); });
  EXPECT_NE(e.find("tiny (test): the pre-tokenizer regex does not compile"), std::string::npos)
      << e;
}

// Hugging Face's BPE without ignore_merges runs the merges even on a piece that is a token: with
// merges b c, a b, ab c the piece "abc" is a, bc (tokenizers 0.23: [0, 4]; with ignore_merges [5]).
TEST(BpeTokenizer, APieceThatIsATokenIsItOnlyWhenTheModelSaysSo) {
  BpeModel m;
  m.name = "merges", m.source = "test";
  for (int b = 0; b < 256; ++b) m.tokens.push_back(std::string(1, char(b)));
  m.tokens.push_back("ab");   // 256
  m.tokens.push_back("bc");   // 257
  m.tokens.push_back("abc");  // 258
  m.merges = {{'b', 'c', 257}, {'a', 'b', 256}, {256, 'c', 258}};
  m.whole_piece_first = false;
  EXPECT_EQ(BpeTokenizer(m).encode("abc"), (std::vector<int32_t>{'a', 257}));
  EXPECT_EQ(BpeTokenizer(m).encode("abcabc"), (std::vector<int32_t>{'a', 257, 'a', 257}));
  m.whole_piece_first = true;
  EXPECT_EQ(BpeTokenizer(m).encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(BpeTokenizer(m).encode("ab"), (std::vector<int32_t>{256}));
}

TEST(BpeTokenizer, AByteWithoutATokenIsAnErrorNamingIt) {
  BpeModel m = tiny_model();
  m.tokens['z'].clear();
  const BpeTokenizer tok(m);
  std::string e = error_of([&] { tok.encode("abz"); });
  EXPECT_NE(e.find("byte 0x7a has no token"), std::string::npos) << e;
}

// The merged pieces an encode call keeps give the same ids as merging each time.
TEST(BpeTokenizer, RepeatedPiecesGiveTheSameIds) {
  const BpeTokenizer hf = BpeTokenizer::from_hf_json(fixture("kjv_bpe.json"));
  const std::string word = " Zerubbabel";  // not one token: merged, then reused
  const std::vector<int32_t> once = hf.encode(word);
  ASSERT_GT(once.size(), 1u);
  std::string text;
  for (int i = 0; i < 5; ++i) text += word;
  std::vector<int32_t> want;
  for (int i = 0; i < 5; ++i) want.insert(want.end(), once.begin(), once.end());
  EXPECT_EQ(hf.encode(text), want);
}

// One tokenizer, several threads at once (the sanitizer builds check the sharing too).
TEST(BpeTokenizer, ManyThreadsEncodeWithOneTokenizer) {
  const BpeTokenizer& tok = cl100k();
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Verse " + std::to_string(i) + ": In the beginning\n";
  const std::vector<int32_t> want = tok.encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = tok.encode(text); });
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) EXPECT_EQ(g, want);
}
