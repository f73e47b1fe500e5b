// read_tiktoken_file and decode_base64 (data/tiktoken_file.h): the rank file, line by line, with
// errors that name the file and the line. Leaves out: checking the file's hash (tiktoken's
// expected_hash): a local file is the user's.
#include "data/tiktoken_file.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "core/error.h"

namespace loom::data {

namespace {

constexpr int32_t kMaxRank = 1 << 22;

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// A line with control bytes (other than tab) or NUL: a binary file, such as the protobuf of a
// SentencePiece model (which starts with a newline byte: its first field's tag).
bool looks_binary(std::string_view line) {
  for (unsigned char c : line.substr(0, 256))
    if (c < 0x20 && c != '\t') return true;
  return false;
}

// The error for a line that is not "base64 rank".
[[noreturn]] void bad_line(const std::string& path, int64_t line_no, std::string_view line,
                           std::string_view what) {
  if (looks_binary(line))
    LOOM_FAIL("tiktoken rank file ", path, ":", line_no,
              ": binary, not \"base64 rank\" lines (a "
              "SentencePiece model, such as Llama 2's tokenizer.model? loom reads tiktoken-format "
              "files only, such as Llama 3's)");
  LOOM_FAIL("tiktoken rank file ", path, ":", line_no, ": ", what);
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in.good(), "tiktoken rank file ", path, ": cannot open it: ", std::strerror(errno));
  std::string text(std::istreambuf_iterator<char>(in), {});
  LOOM_CHECK(!in.bad(), "tiktoken rank file ", path, ": cannot read it");
  return text;
}

}  // namespace

bool decode_base64(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() % 4 != 0) return false;
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return false;  // "x=y=" is not padding
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const int d = k >= 4 - pad ? 0 : base64_value(text[i + size_t(k)]);
      if (d < 0) return false;
      v = (v << 6) | uint32_t(d);
    }
    out += char(v >> 16);
    if (pad < 2) out += char((v >> 8) & 0xFF);
    if (pad < 1) out += char(v & 0xFF);
  }
  return true;
}

std::vector<std::string> read_tiktoken_file(const std::string& path) {
  const std::string text = read_whole(path);
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int64_t> line_of;  // token -> the line that gave it
  std::string token;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0)
      bad_line(path, line_no, line,
               str("expected \"base64 rank\", got \"", line.substr(0, 80), "\""));
    const std::string_view b64 = line.substr(0, space), num = line.substr(space + 1);
    if (!decode_base64(b64, token) || token.empty())
      bad_line(path, line_no, line, str("\"", b64.substr(0, 80), "\" is not a token in base64"));
    int32_t rank = -1;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    LOOM_CHECK(ec == std::errc() && p == num.data() + num.size() && rank >= 0 && rank < kMaxRank,
               "tiktoken rank file ", path, ":", line_no, ": rank \"", num.substr(0, 40),
               "\" is not a number in [0, ", kMaxRank, ")");
    if (size_t(rank) >= tokens.size()) tokens.resize(size_t(rank) + 1);
    LOOM_CHECK(tokens[size_t(rank)].empty(), "tiktoken rank file ", path, ":", line_no, ": rank ",
               rank, " is given twice");
    auto [it, fresh] = line_of.emplace(token, line_no);
    LOOM_CHECK(fresh, "tiktoken rank file ", path, ":", line_no, ": token \"", b64,
               "\" is given twice (first on line ", it->second, ")");
    tokens[size_t(rank)] = token;
  }
  LOOM_CHECK(!tokens.empty(), "tiktoken rank file ", path, ": holds no tokens");
  return tokens;
}

}  // namespace loom::data
