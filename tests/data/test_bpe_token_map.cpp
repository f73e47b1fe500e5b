// data/bpe_token_map: every token found at its id, absent bytes not, holes skipped, repeated
// bytes reported; bytes that differ only in length or a NUL are different keys.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/bpe_token_map.h"

using namespace loom::data;

TEST(BpeTokenMap, FindsEveryTokenAtItsId) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  for (int i = 0; i < 20000; ++i)
    tokens.push_back("tok" + std::to_string(i) + std::string(i % 17, 'x'));
  tokens.push_back("");  // a hole
  tokens.push_back(std::string("a\0", 2));
  tokens.push_back(std::string("a\0\0\0\0\0\0\0\0", 9));
  BpeTokenMap m;
  EXPECT_EQ(m.find("a"), -1);  // before build
  ASSERT_EQ(m.build(tokens), -1);
  EXPECT_EQ(m.size(), tokens.size() - 1);
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].empty()) {
      ASSERT_EQ(m.find(tokens[id]), int32_t(id)) << id;
    }
  }
  EXPECT_EQ(m.find(""), -1);
  EXPECT_EQ(m.find("tok20000"), -1);
  EXPECT_EQ(m.find(std::string("a\0\0", 3)), -1);
  EXPECT_NE(BpeTokenMap::hash(std::string("a\0", 2)), BpeTokenMap::hash("a"));
}

TEST(BpeTokenMap, RepeatedBytesAreReportedByTheLaterId) {
  BpeTokenMap m;
  EXPECT_EQ(m.build({"a", "b", "ab", "b"}), 3);
  EXPECT_EQ(m.find("b"), 1);
}
