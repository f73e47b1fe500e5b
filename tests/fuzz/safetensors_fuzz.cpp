// libFuzzer harness: the safetensors reader (core/safetensors.h) on arbitrary bytes. Every input
// must either load or throw loom::Error; a crash, hang, leak or other exception is a bug.
// Leaves out: writing (the round trip is tested in tests/core/test_safetensors.cpp).
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loom::SafetensorsFile f = loom::read_safetensors(data, size, "fuzz.safetensors");
    // What loaded must be self-consistent: every tensor's bytes lie inside the input.
    size_t total = 0;
    for (const auto& [name, t] : f.tensors) total += size_t(t.numel()) * t.element_size();
    if (total > size) std::abort();
  } catch (const loom::Error&) {
  }
  return 0;
}
