// tiktoken's rank files (cl100k_base.tiktoken, Llama 3's tokenizer.model): one token a line,
// "base64(bytes) rank". Leaves out: the regex and special tokens, which the file does not hold
// (data/bpe_presets.h names them), and downloading (loom reads local files only).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::data {

// rank -> the token's bytes (an empty string where no line has that rank). Blank lines are
// skipped, as tiktoken does. Errors name the file and the line: not "base64 rank", bad base64, an
// empty token, a rank outside [0, 2^22) (no vocabulary is near 4,194,304, and a corrupt rank
// cannot ask for gigabytes), a rank or a token given twice, no tokens at all. A file that looks
// binary is named as probably a SentencePiece model (Llama 2's tokenizer.model), not read here.
std::vector<std::string> read_tiktoken_file(const std::string& path);

// Standard base64 (RFC 4648, '=' padding) into `out`; false for anything else.
bool decode_base64(std::string_view text, std::string& out);

}  // namespace loom::data
