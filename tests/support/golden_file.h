// Values computed by PyTorch or transformers for tests to compare with, read from the text format
// of tests/nn/golden/make_golden.py: "<name> <ndim> <dim0> ...", then a line of the values
// ('#' lines are comments). Leaves out: writing them (the Python scripts do).
#pragma once

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace loom::test {

// tests/nn/golden/ in the source tree ($LOOM_SOURCE_DIR, which ctest sets, else next to this file).
inline std::string golden_dir() {
  if (const char* s = std::getenv("LOOM_SOURCE_DIR")) return std::string(s) + "/tests/nn/golden/";
  std::string here = __FILE__;  // tests/support/golden_file.h
  return here.substr(0, here.find_last_of('/')) + "/../nn/golden/";
}

// Every tensor of the file as float64 on the CPU, by name.
struct GoldenFile {
  std::string path;
  std::map<std::string, Tensor> values;
  const Tensor& at(const std::string& name) const {
    auto it = values.find(name);
    if (it == values.end()) throw Error("golden file " + path + " has no tensor \"" + name + "\"");
    return it->second;
  }
};

inline GoldenFile read_golden_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error("cannot open golden file " + path + " (set LOOM_SOURCE_DIR to the source tree)");
  GoldenFile g{path, {}};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream head(line);
    std::string name;
    int64_t ndim = 0;
    head >> name >> ndim;
    Shape shape(size_t(ndim), 0);
    for (auto& d : shape) head >> d;
    std::getline(in, line);
    std::istringstream vals(line);
    std::vector<double> v(size_t(loom::numel(shape)));
    for (auto& x : v) vals >> x;
    if (!vals && !v.empty()) throw Error("golden file " + path + ": too few values for " + name);
    g.values[name] = from_vector(v, shape);
  }
  return g;
}

}  // namespace loom::test
