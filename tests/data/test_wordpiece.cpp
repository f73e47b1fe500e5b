// data/wordpiece: greedy longest-match-first with the continuation prefix, [UNK] for a word too
// long or with a piece no token fits, special tokens refused / allowed / as text, decode (the
// WordPiece decoder, special tokens kept or skipped) and its round trip on lower-cased text,
// BERT's pair layout, the constructor's refusals, one tokenizer in many threads.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/wordpiece.h"

using namespace loom;
using namespace loom::data;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

template <typename F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error";
  return "";
}

// A vocabulary small enough to reason about: ids in the order listed.
WordPieceModel tiny_model() {
  WordPieceModel m;
  m.name = "tiny", m.source = "test";
  const char* tokens[] = {"[PAD]",  "[UNK]", "[CLS]", "[SEP]",   "[MASK]", "un", "##aff",
                          "##able", "##a",   "##ff",  "##f",     "a",      "b",  "##b",
                          "play",   "##ing", "!",     "affable", ",",      "."};
  for (int32_t i = 0; i < int32_t(std::size(tokens)); ++i) m.vocab.emplace_back(tokens[i], i);
  for (int32_t i = 0; i < 5; ++i) m.specials.emplace_back(tokens[i], i);
  return m;
}

}  // namespace

TEST(WordPiece, LongestMatchFirstWithTheContinuationPrefix) {
  const WordPieceTokenizer tok(tiny_model());
  EXPECT_EQ(tok.encode("unaffable"), (std::vector<int32_t>{5, 6, 7}));  // un ##aff ##able
  EXPECT_EQ(tok.encode("affable"), (std::vector<int32_t>{17}));         // the whole word is a token
  EXPECT_EQ(tok.encode("playing, a b!"), (std::vector<int32_t>{14, 15, 18, 11, 12, 16}));
  EXPECT_EQ(tok.encode("abb"), (std::vector<int32_t>{11, 13, 13}));  // a ##b ##b
  // "bab": b, then "##ab" is no token, "##a" is, then "##b".
  EXPECT_EQ(tok.encode("bab"), (std::vector<int32_t>{12, 8, 13}));
  EXPECT_EQ(tok.encode("  \t\n"), std::vector<int32_t>{});
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
}

TEST(WordPiece, UnknownWordsAreOneUnk) {
  const WordPieceTokenizer tok(tiny_model());
  // "abc": a, ##b, then nothing fits "c": the whole word is one [UNK], not a ##b [UNK].
  EXPECT_EQ(tok.encode("abc b"), (std::vector<int32_t>{1, 12}));
  EXPECT_EQ(tok.encode("\xE2\x98\x83 a"), (std::vector<int32_t>{1, 11}));  // a snowman
  EXPECT_EQ(tok.encode("c"), (std::vector<int32_t>{1}));
  // max_input_chars_per_word (100): 100 characters are encoded, 101 are [UNK] at once.
  const std::vector<int32_t> hundred = tok.encode(std::string(100, 'b'));
  ASSERT_EQ(hundred.size(), 100u);
  EXPECT_EQ(hundred[0], 12);
  EXPECT_EQ(hundred[99], 13);
  EXPECT_EQ(tok.encode(std::string(101, 'b')), (std::vector<int32_t>{1}));
  // Characters, not bytes: 100 two-byte characters are one word of 100.
  WordPieceModel m = tiny_model();
  m.vocab.emplace_back("\xC3\xA9", 20), m.vocab.emplace_back("##\xC3\xA9", 21);
  m.normalizer->lowercase = false;  // keep the accent
  const WordPieceTokenizer accents(std::move(m));
  std::string e100;
  for (int i = 0; i < 100; ++i) e100 += "\xC3\xA9";
  EXPECT_EQ(accents.encode(e100).size(), 100u);
  EXPECT_EQ(accents.encode(e100 + "\xC3\xA9"), (std::vector<int32_t>{1}));
  m = tiny_model();
  m.max_input_chars_per_word = 2;
  EXPECT_EQ(WordPieceTokenizer(m).encode("abb ab"), (std::vector<int32_t>{1, 11, 13}));
}

TEST(WordPiece, SpecialTokensRefusedAllowedOrText) {
  const WordPieceTokenizer tok(tiny_model());
  const std::string text = "a [MASK] b";
  std::string e = error_of([&] { tok.encode(text); });
  EXPECT_NE(e.find("tiny (test): the text holds the special token \"[MASK]\" at byte 2"),
            std::string::npos)
      << e;
  EXPECT_EQ(tok.encode(text, SpecialTokens::allow()), (std::vector<int32_t>{11, 4, 12}));
  EXPECT_EQ(tok.encode(text, SpecialTokens::allow({"[MASK]"})), (std::vector<int32_t>{11, 4, 12}));
  // As text: "[" and "]" are punctuation without tokens, "mask" is unknown.
  EXPECT_EQ(tok.encode(text, SpecialTokens::as_text()), (std::vector<int32_t>{11, 1, 1, 1, 12}));
  // Matched in the raw text, before lower-casing: "[mask]" is not [MASK].
  EXPECT_EQ(tok.encode("[mask]", SpecialTokens::allow()), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ(tok.encode("a[SEP][SEP]b", SpecialTokens::allow()),
            (std::vector<int32_t>{11, 3, 3, 12}));
}

TEST(WordPiece, DecodeJoinsPiecesAndCleansUp) {
  const WordPieceTokenizer tok(tiny_model());
  const std::vector<int32_t> ids = {2, 5, 6, 7, 18, 14, 15, 16, 3, 19};
  EXPECT_EQ(tok.decode(ids), "[CLS] unaffable, playing! [SEP].");
  EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), "unaffable, playing!.");
  // The first token keeps its prefix (the decoder joins from the second on).
  EXPECT_EQ(tok.decode(std::vector<int32_t>{6, 11}), "##aff a");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{}), "");
  WordPieceModel m = tiny_model();
  m.decoder_cleanup = false;
  EXPECT_EQ(WordPieceTokenizer(m).decode(std::vector<int32_t>{11, 18, 12}), "a , b");
  m.wordpiece_decoder = false;  // no decoder: the tokens joined by spaces
  EXPECT_EQ(WordPieceTokenizer(m).decode(std::vector<int32_t>{5, 6, 18}), "un ##aff ,");
  std::string e = error_of([&] { tok.decode(std::vector<int32_t>{11, 20}); });
  EXPECT_NE(e.find("cannot decode id 20 at position 1: outside the vocabulary [0, 20)"),
            std::string::npos)
      << e;
  e = error_of([&] { tok.decode(std::vector<int32_t>{-1}); });
  EXPECT_NE(e.find("cannot decode id -1 at position 0"), std::string::npos) << e;
}

// decode(encode(x)) == x for lower-cased text whose punctuation the cleanup rejoins.
TEST(WordPiece, DecodeRoundTripOnLowerCasedText) {
  const WordPieceTokenizer tok = WordPieceTokenizer::from_hf_json(fixture("kjv_wordpiece.json"));
  const std::string text =
      "in the beginning god created the heaven and the earth. and the earth was without form, "
      "and void! who hath believed our report? unsearchable riches, xylophones and zygotes.";
  const std::vector<int32_t> ids = tok.encode(text);
  EXPECT_GT(ids.size(), 30u);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.decode(tok.encode("In  The\tBeginning\u00a0GOD, Héllo")),
            "in the beginning god, hello");  // normalized: the round trip of its lower-cased form
}

TEST(WordPiece, PairLayoutAndBertIds) {
  const WordPieceTokenizer tok(tiny_model());
  const BertInput single = tok.encode_single("a b");
  EXPECT_EQ(single.ids, (std::vector<int32_t>{2, 11, 12, 3}));
  EXPECT_EQ(single.token_types, (std::vector<int32_t>{0, 0, 0, 0}));
  const Tokenizer& any = tok;  // the interface's post-process: the same ids
  EXPECT_EQ(any.post_process(tok.encode("a b")), single.ids);
  const BertInput pair = tok.encode_pair("a b", "affable!");
  EXPECT_EQ(pair.ids, (std::vector<int32_t>{2, 11, 12, 3, 17, 16, 3}));
  EXPECT_EQ(pair.token_types, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1}));
  const BertInput cut = tok.encode_pair("a b a b", "b", 6);  // 3 tokens of room: a b | b
  EXPECT_EQ(cut.ids, (std::vector<int32_t>{2, 11, 12, 3, 12, 3}));
  EXPECT_EQ(tok.cls_id(), 2);
  EXPECT_EQ(tok.sep_id(), 3);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.mask_id(), 4);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.special_ids(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(tok.vocab_size(), 20);
  EXPECT_EQ(tok.token_text(6), "##aff");
  EXPECT_EQ(tok.find_token("##able"), 7);
  EXPECT_FALSE(tok.find_token("able").has_value());
  WordPieceModel m = tiny_model();
  m.mask_token = "<mask>";
  std::string e = error_of([&] { WordPieceTokenizer(m).mask_id(); });
  EXPECT_NE(e.find("tiny (test): has no token \"<mask>\""), std::string::npos) << e;
}

TEST(WordPiece, ConstructorRefusals) {
  WordPieceModel m = tiny_model();
  m.unk_token = "<unk>";
  std::string e = error_of([&] { WordPieceTokenizer{m}; });
  EXPECT_NE(e.find("tiny (test): the unknown token \"<unk>\" is not in the vocabulary"),
            std::string::npos)
      << e;
  m = tiny_model();
  m.specials.emplace_back("<extra>", 6);
  e = error_of([&] { WordPieceTokenizer{m}; });
  EXPECT_NE(e.find("special token \"<extra>\" has id 6, which is the token \"##aff\""),
            std::string::npos)
      << e;
  m = tiny_model();
  m.vocab.emplace_back("c", -3);
  e = error_of([&] { WordPieceTokenizer{m}; });
  EXPECT_NE(e.find("token \"c\" has id -3"), std::string::npos) << e;
  // An added token beyond the vocabulary widens it; a text given twice keeps the later id.
  m = tiny_model();
  m.specials.emplace_back("<extra>", 25);
  m.vocab.emplace_back("a", 21);
  const WordPieceTokenizer wide(m);
  EXPECT_EQ(wide.vocab_size(), 26);
  EXPECT_EQ(wide.encode("a"), (std::vector<int32_t>{21}));
  e = error_of([&] { wide.decode(std::vector<int32_t>{11}); });  // the earlier id of "a"
  EXPECT_NE(e.find("cannot decode id 11 at position 0: no token has that id"), std::string::npos)
      << e;
  EXPECT_EQ(wide.decode(std::vector<int32_t>{21, 25}), "a <extra>");
}

// encode is const and keeps its state on the stack: threads share one tokenizer.
TEST(WordPiece, OneTokenizerManyThreads) {
  const WordPieceTokenizer tok = WordPieceTokenizer::from_hf_json(fixture("kjv_wordpiece.json"));
  std::vector<std::string> texts;
  for (int i = 0; i < 4; ++i)
    texts.push_back("And God said, Let there be light: and there was light " + std::to_string(i));
  std::vector<std::vector<int32_t>> serial, threaded(texts.size());
  for (const std::string& t : texts) serial.push_back(tok.encode(t));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 50; ++r) threaded[i] = tok.encode(texts[i]);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(threaded, serial);
}
