// safetensors_tool: the C++ half of the Python interop test (tests/core/safetensors_interop.py).
//   safetensors_tool write <path>             writes the known tensors below with loom
//   safetensors_tool check <path> <producer>  reads a file (written by Python) and checks it
// Both sides describe the same tensors; keep this list in step with the Python script.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "autograd/ops/ops.h"
#include "nn/serialize.h"

using namespace loom;

namespace {

template <typename T>
Tensor bits16(const std::vector<uint16_t>& bits, const Shape& shape) {
  std::vector<T> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i].bits = bits[i];
  return from_vector(v, shape);
}

// The known tensors, in a deliberately mixed dtype order.
NamedTensors known_tensors() {
  std::vector<double> f64(6);
  for (int i = 0; i < 6; ++i) f64[size_t(i)] = 0.5 * i - 1;
  std::vector<float> f32(12);
  for (int i = 0; i < 12; ++i) f32[size_t(i)] = 0.25f * float(i) - 1.5f;
  Tensor rows = from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  return {
      {"u8", from_vector<uint8_t>({0, 1, 127, 128, 255}, {5})},
      {"f64", from_vector(f64, {2, 3})},
      {"f16",
       bits16<Half>({0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7e00}, {9})},
      {"bool", from_vector<bool>({true, false, true}, {3})},
      {"bf16", bits16<BFloat16>({0x3f80, 0xc040, 0x7f80, 0x0001, 0x7fc0, 0x4049}, {2, 3})},
      {"i64", from_vector<int64_t>({-(int64_t(1) << 62), -1, 0, 1, (int64_t(1) << 62) + 3}, {5})},
      {"f32", from_vector(f32, {3, 4})},
      {"i32", from_vector<int32_t>({INT32_MIN, 7, INT32_MAX, 0}, {2, 2})},
      {"scalar", from_vector<float>({3.5f}, {})},
      {"empty", empty({0, 3}, {.dtype = kF32})},
      {"transposed", rows.t()},  // written from a non-contiguous view: [[0, 3], [1, 4], [2, 5]]
  };
}

int check(const std::string& path, const std::string& producer) {
  SafetensorsFile f = load_safetensors(path);
  NamedTensors want = known_tensors();
  int bad = 0;
  if (f.tensors.size() != want.size()) {
    std::cerr << path << ": " << f.tensors.size() << " tensors, expected " << want.size() << "\n";
    ++bad;
  }
  for (const auto& [name, w] : want) {
    if (!f.contains(name)) {
      std::cerr << path << ": no tensor '" << name << "'\n";
      ++bad;
      continue;
    }
    const Tensor& g = f.at(name);
    Tensor hw = to_host_contiguous(w);
    size_t n = size_t(hw.numel()) * hw.element_size();
    if (g.dtype() != w.dtype() || g.shape() != w.shape() ||
        (n && std::memcmp(g.data_ptr(), hw.data_ptr(), n))) {
      std::cerr << path << ": tensor '" << name << "' is " << describe(g) << ", expected "
                << describe(w) << " (or its bytes differ)\n";
      ++bad;
    }
  }
  auto meta = [&](const char* k) {
    return f.metadata.count(k) ? f.metadata.at(k) : std::string("<missing>");
  };
  if (meta("producer") != producer || meta("note") != "ünïcödé ✓") {
    std::cerr << path << ": metadata producer='" << meta("producer") << "' note='" << meta("note")
              << "'\n";
    ++bad;
  }
  if (bad) return 1;
  std::cout << "ok: " << path << " (" << f.tensors.size() << " tensors)\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "write" && argc == 3) {
      save_safetensors(argv[2], known_tensors(), {{"producer", "loom"}, {"note", "ünïcödé ✓"}});
      return 0;
    }
    if (cmd == "check" && argc == 4) return check(argv[2], argv[3]);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  std::cerr << "usage: safetensors_tool write <path> | check <path> <producer>\n";
  return 64;
}
