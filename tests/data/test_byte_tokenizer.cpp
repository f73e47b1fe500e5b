// data/byte_tokenizer: bytes in, bytes out (ASCII, multi-byte UTF-8, every byte value). Leaves
// out: text_to_shards (tests/data/test_text_shards.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/byte_tokenizer.h"
#include "data/token_shards.h"
#include "support/errors.h"
#include "support/temp_files.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

// Latin accents (2 bytes), CJK (3 bytes), an emoji (4 bytes), a combining mark, NUL and CRLF.
const std::string kMixed =
    "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
    "\xF0\x9F\x99\x82 e\xCC\x81\r\n" +
    std::string(1, '\0') + "end";

}  // namespace

TEST(ByteTokenizer, EncodesEachByteAsItsValue) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.encode("Ab"), (std::vector<uint16_t>{65, 98}));
  EXPECT_EQ(tok.encode("\xC3\xA9"), (std::vector<uint16_t>{195, 169}));  // é: two tokens
  EXPECT_EQ(tok.encode("\xF0\x9F\x99\x82"), (std::vector<uint16_t>{240, 159, 153, 130}));
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(ByteTokenizer, RoundTripsUtf8AndEveryByte) {
  ByteTokenizer tok;
  std::vector<uint16_t> ids = tok.encode(kMixed);
  EXPECT_EQ(ids.size(), kMixed.size());
  EXPECT_EQ(tok.decode(ids), kMixed);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  ids = tok.encode(all);
  for (int b = 0; b < 256; ++b) ASSERT_EQ(ids[size_t(b)], b);
  EXPECT_EQ(tok.decode(ids), all);
  // Token by token (as a sampler prints them), the pieces concatenate to the text.
  std::string streamed;
  for (uint16_t id : tok.encode(kMixed)) streamed += tok.decode(std::vector<uint16_t>{id});
  EXPECT_EQ(streamed, kMixed);
}

TEST(ByteTokenizer, DecodeRefusesIdsOutsideTheBytes) {
  ByteTokenizer tok;
  std::string e = error_of([&] { tok.decode(std::vector<uint16_t>{104, 105, 256}); });
  EXPECT_NE(e.find("token 256 at position 2 is outside the byte vocabulary [0, 256)"),
            std::string::npos)
      << e;
}
