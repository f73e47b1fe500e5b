// safetensors: the file format of Hugging Face's safetensors library, for host (CPU) contiguous
// tensors: an 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data.
// Leaves out: copying tensors from a device or a strided layout (core knows no kernels); the
// tensor-facing save_safetensors/load_safetensors in nn/serialize.h do that and call these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom {

// Ordered (name, tensor) pairs: what state_dict() returns and what a file holds.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using StringMap = std::map<std::string, std::string>;

// A file read back: contiguous CPU tensors in file (data) order, and the "__metadata__" strings.
struct SafetensorsFile {
  std::string path;
  NamedTensors tensors;
  StringMap metadata;

  bool contains(const std::string& name) const;
  const Tensor& at(const std::string& name) const;  // Error names the file and the tensor
};

// One header entry: where a tensor's bytes are, relative to the start of the data section.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

// A checked header: entries sorted by offset, contiguous from 0, ending at the end of the file.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;
  StringMap metadata;
  uint64_t data_start = 0;  // 8 + N: the file offset of the data section
};

// Refuse headers larger than this (the reference implementation's limit too).
constexpr uint64_t kMaxSafetensorsHeader = 100ull << 20;

// "F32", "BF16", ... and back (the latter throws on a dtype loom does not have, naming `where`).
const char* safetensors_dtype_name(DType t);
DType dtype_from_safetensors_name(const std::string& s, const std::string& where);

// Writes `host_tensors` (defined, on the CPU, contiguous; names unique) atomically (see
// core/atomic_file.h). The data is ordered by decreasing element size (stable otherwise), as the
// reference writer does, so every tensor is aligned for readers that map the file; the header is
// padded with spaces so the data starts at a multiple of 8.
void write_safetensors(const std::string& path, const NamedTensors& host_tensors,
                       const StringMap& metadata = {});

// The bytes write_safetensors would write, in memory (for callers that checksum or patch the
// file before writing it; nn/checkpoint.cpp). `name` stands for the file in errors.
std::string encode_safetensors(const NamedTensors& host_tensors, const StringMap& metadata,
                               const std::string& name);

// Reads and checks the whole file. Any defect (truncation, bad JSON, unknown dtype, a shape that
// does not match its byte range, overlapping or gapped offsets, a data section of the wrong size,
// duplicate names) is an Error naming the file and what is wrong; never a crash.
SafetensorsFile read_safetensors(const std::string& path);
// The same from n bytes in memory; `name` stands for the file in errors.
SafetensorsFile read_safetensors(const void* data, size_t n, const std::string& name);

// Reads and checks the header only (the data section's size is checked against the file size).
SafetensorsHeader read_safetensors_header(const std::string& path);
// The same from a whole file's n bytes in memory (a mapped file: core/safetensors_mapped.h);
// `name` stands for the file in errors.
SafetensorsHeader read_safetensors_header(const void* data, size_t n, const std::string& name);

// Parses and checks the JSON header text against a data section of `data_size` bytes.
// `source` names the file in errors. Exposed for tests.
SafetensorsHeader parse_safetensors_header(const std::string& json_text, uint64_t data_size,
                                           const std::string& source);

}  // namespace loom
