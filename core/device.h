// Device: where a tensor's memory lives: the CPU, or CUDA device N.
// Leaves out: streams and device guards (core/cuda/stream.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace loom {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}  // NOLINT
  // Parses "cpu", "cuda" (= cuda:0) and "cuda:N"; throws loom::Error naming the string otherwise.
  explicit Device(const std::string& spec);

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

inline const Device kCPU{DeviceType::CPU, 0};
// Named cuda_device, not cuda: loom::cuda is the namespace of the CUDA runtime and backend.
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, index); }

std::ostream& operator<<(std::ostream& os, const Device& d);

}  // namespace loom
