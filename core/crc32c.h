// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord framing
// (TensorBoard event files) and of loom's training checkpoints.
// Leaves out: ARM's CRC instructions (ARM uses the table loop); x86 uses SSE4.2 when present.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom {

// CRC-32C of n bytes, continuing from `crc` (0 to start): crc32c("123456789") == 0xE3069283.
// Uses the SSE4.2 crc32 instruction when the CPU has it (~20x the table loop), else the table.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// The byte-at-a-time table version: the reference the fast path is tested against.
uint32_t crc32c_table(const void* data, size_t n, uint32_t crc = 0);

// TFRecord's masked CRC: rotate right by 15 and add a constant, so that a CRC stored inside the
// data it covers does not make the checksum trivially predictable.
inline uint32_t masked_crc32c(const void* data, size_t n) {
  uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace loom
