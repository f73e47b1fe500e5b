// Saving and loading named tensors in safetensors files, from and to any device and layout.
// These copy each tensor to a contiguous host tensor and call the byte-level reader/writer in
// core/safetensors.h. Leaves out: training checkpoints (nn/checkpoint.h builds on these).
#pragma once

#include <string>

#include "core/safetensors.h"

namespace loom {

// Writes `tensors` (any device, any strides, any dtype loom has) to `path` atomically, with the
// "__metadata__" strings. Reading them back gives the same names, dtypes, shapes and bits.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const StringMap& metadata = {});

// Reads every tensor of `path` (errors name the file and what is wrong) onto `device`.
SafetensorsFile load_safetensors(const std::string& path, Device device = kCPU);

// A contiguous CPU copy of `t` with no autograd history (`t` itself when it already is one).
Tensor to_host_contiguous(const Tensor& t);

}  // namespace loom
