// data/tiktoken_file: base64 as RFC 4648 has it, a rank file with holes and blank lines, and each
// refusal naming the file and the line (malformed lines, bad base64 or ranks, repeats, a
// SentencePiece model, an empty or missing file).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "data/tiktoken_file.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::data;
using loom::test::TempDir;

namespace {

std::string error_reading(const TempDir& dir, const std::string& contents) {
  const std::string path = dir.file("ranks.tiktoken");
  loom::test::write_bytes(path, contents);
  try {
    read_tiktoken_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a loom::Error for: " << contents;
  return "";
}

std::string b64(const std::string& s) {
  std::string out;
  EXPECT_TRUE(decode_base64(s, out)) << s;
  return out;
}

}  // namespace

TEST(TiktokenFile, Base64) {
  EXPECT_EQ(b64(""), "");
  EXPECT_EQ(b64("YQ=="), "a");
  EXPECT_EQ(b64("YWI="), "ab");
  EXPECT_EQ(b64("YWJj"), "abc");
  EXPECT_EQ(b64("IGhlbGxv"), " hello");
  EXPECT_EQ(b64("/+8="), "\xFF\xEF");
  std::string out;
  for (const char* bad : {"YQ=", "Y===", "YQ=a", "*QQQ", "YQ==YQ==", "Y Q="})
    EXPECT_FALSE(decode_base64(bad, out)) << bad;
}

TEST(TiktokenFile, ReadsRanksWithHolesAndBlankLines) {
  TempDir dir;
  const std::string path = dir.file("r.tiktoken");
  loom::test::write_bytes(path, "YQ== 0\nYg== 1\r\n\nYWI= 4\n");
  const std::vector<std::string> t = read_tiktoken_file(path);
  EXPECT_EQ(t, (std::vector<std::string>{"a", "b", "", "", "ab"}));
}

TEST(TiktokenFile, EachRefusalNamesTheFileAndTheLine) {
  TempDir dir;
  const std::string f = dir.file("ranks.tiktoken");
  struct Case {
    std::string contents, message;
  };
  const std::vector<Case> cases = {
      {"YQ== 0\nYg==1\n", f + ":2: expected \"base64 rank\", got \"Yg==1\""},
      {"YQ== 0\n 1\n", f + ":2: expected \"base64 rank\""},
      {"YQ== 0\nY!== 1\n", f + ":2: \"Y!==\" is not a token in base64"},
      {"YQ== 0\nYg== one\n", f + ":2: rank \"one\" is not a number in [0, 4194304)"},
      {"YQ== 0\nYg== -1\n", f + ":2: rank \"-1\" is not a number"},
      {"YQ== 0\nYg== 4194304\n", f + ":2: rank \"4194304\" is not a number in [0, 4194304)"},
      {"YQ== 0\nYg== 1 x\n", f + ":2: rank \"1 x\" is not a number"},
      {"YQ== 0\n\nYg== 0\n", f + ":3: rank 0 is given twice"},
      {"YQ== 0\nYg== 1\nYQ== 2\n", f + ":3: token \"YQ==\" is given twice (first on line 1)"},
      {"", f + ": holds no tokens"},
      {"\n\n", f + ": holds no tokens"},
      {std::string("YQ== 0\n\x0b\x08\x01\x12\x00 1", 14), f + ":2: binary, not \"base64 rank\""},
      // The start of a SentencePiece model (Llama 2's tokenizer.model): a newline byte, then
      // binary.
      {"\x0a\x85\x01\x12\x0c\x3c\x75\x6e\x6b\x3e", f + ":2: binary, not \"base64 rank\" lines (a "
                                                       "SentencePiece model, such as Llama 2's"},
  };
  for (const Case& c : cases) {
    const std::string e = error_reading(dir, c.contents);
    EXPECT_NE(e.find(c.message), std::string::npos) << "want: " << c.message << "\ngot:  " << e;
  }
  try {
    read_tiktoken_file(dir.file("missing.tiktoken"));
    ADD_FAILURE() << "expected a loom::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.tiktoken: cannot open it"), std::string::npos)
        << e.what();
  }
}
