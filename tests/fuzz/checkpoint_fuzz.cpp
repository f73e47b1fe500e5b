// libFuzzer harness: the training checkpoint reader (nn/checkpoint.h, load_checkpoint_bytes).
// The first input byte chooses whether the harness first rewrites the file's loom_crc32c digits
// to match the (mutated) bytes, so that the checks behind the CRC are reached too; either way the
// reader must load or throw loom::Error. Leaves out: the directory scan (latest_checkpoint).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "core/crc32c.h"
#include "core/error.h"
#include "nn/checkpoint.h"

namespace {
// Sets the 8 digits after the first "loom_crc32c":" to the CRC-32C of the whole buffer computed
// with those digits as '0' (Note [Checkpoint integrity] in nn/checkpoint.cpp).
void fix_crc(std::string& b) {
  const std::string field = "\"loom_crc32c\":\"";
  size_t at = b.find(field, 8);
  if (at == std::string::npos || at + field.size() + 8 > b.size()) return;
  at += field.size();
  b.replace(at, 8, "00000000");
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", loom::crc32c(b.data(), b.size()));
  b.replace(at, 8, hex);
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) fix_crc(bytes);
  try {
    loom::TrainingState s = loom::load_checkpoint_bytes(bytes.data(), bytes.size(), "fuzz.ckpt");
    for (const auto& [name, rng] : s.rng) (void)rng;
    (void)s.extra.size();
  } catch (const loom::Error&) {
  }
  return 0;
}
