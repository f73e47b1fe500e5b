// Where the tests find the Fashion-MNIST idx files, and the skip when they are absent. Leaves out:
// reading them (data/mnist.h).
//
// Looked for, in order: $FASHION_MNIST_DIR (scripts/gpu-check.sh sets it), the repository's
// .data/fashion-mnist (git-ignored; found through $LOOM_SOURCE_DIR, which ctest sets), and Debian's
// dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace loom::testing_support {

inline bool holds_fashion_mnist(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    if (!fs::exists(dir + "/" + name + ".gz", ec)) return false;
  return true;
}

// The folder with the four .gz files, or "" when there is none.
inline std::string fashion_mnist_dir() {
  if (const char* env = std::getenv("FASHION_MNIST_DIR"); env && *env)
    return holds_fashion_mnist(env) ? env : "";
  if (const char* src = std::getenv("LOOM_SOURCE_DIR"); src && *src) {
    std::string local = std::string(src) + "/.data/fashion-mnist";
    if (holds_fashion_mnist(local)) return local;
  }
  const std::string debian = "/usr/share/datasets/fashion-mnist";
  return holds_fashion_mnist(debian) ? debian : "";
}

}  // namespace loom::testing_support

// In a TEST body: sets `var` to the Fashion-MNIST folder, or skips the test saying where it looked.
#define LOOM_FASHION_MNIST_OR_SKIP(var)                                                   \
  const std::string var = ::loom::testing_support::fashion_mnist_dir();                   \
  if (var.empty())                                                                        \
  GTEST_SKIP() << "Fashion-MNIST not found: set FASHION_MNIST_DIR, put the idx files in " \
                  ".data/fashion-mnist, "                                                 \
                  "or apt-get install dataset-fashion-mnist"
