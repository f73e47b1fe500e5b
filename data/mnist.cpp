// The idx reader (zlib's gz* functions read gzip and plain files alike) and the MNIST datasets.
#include "data/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "core/parallel.h"

namespace loom::data {

namespace {

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzPtr = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to n bytes; returns how many arrived. A gzip-level error (corrupt stream, I/O error)
// throws; a short count is left to the caller, who knows what was expected.
int64_t read_some(gzFile f, void* dst, int64_t n, const std::string& who, const std::string& path) {
  int64_t got = 0;
  char* p = static_cast<char*>(dst);
  while (got < n) {
    unsigned chunk = unsigned(std::min<int64_t>(n - got, int64_t(1) << 30));
    int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      LOOM_FAIL(who, ": ", path, ": cannot read: ", msg, " (corrupt gzip data?)");
    }
    if (r == 0) break;
    got += r;
  }
  // zlib reports a gzip stream that ends early as Z_BUF_ERROR after returning what it had.
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  LOOM_CHECK(err == Z_OK || err == Z_BUF_ERROR, who, ": ", path, ": cannot read: ", msg);
  return got;
}

uint32_t big_endian32(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

// root/name.gz if it exists, else root/name; the error lists both and says where to get them.
std::string find_file(const std::string& who, const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path gz = fs::path(root) / (name + ".gz"), plain = fs::path(root) / name;
  std::error_code ec;
  if (fs::is_regular_file(gz, ec)) return gz.string();
  if (fs::is_regular_file(plain, ec)) return plain.string();
  LOOM_FAIL(
      who, ": missing file ", gz.string(), " (nor ", plain.string(),
      " uncompressed). For Fashion-MNIST run `apt-get install dataset-fashion-mnist` (it installs ",
      FashionMNIST::kDefaultRoot, "), or pass the folder holding the idx files.");
}

}  // namespace

Tensor read_idx_u8(const std::string& path, int expected_ndim, const std::string& who) {
  LOOM_CHECK(expected_ndim >= 1 && expected_ndim <= 4, who, ": expected_ndim ", expected_ndim,
             " is not in [1, 4]");
  errno = 0;
  GzPtr f(gzopen(path.c_str(), "rb"));
  LOOM_CHECK(f != nullptr, who, ": cannot open ", path, ": ",
             errno ? std::strerror(errno) : "zlib could not allocate its state");
  gzbuffer(f.get(), 1 << 20);

  // Header: magic (0, 0, type code, ndim), then ndim big-endian uint32 sizes.
  unsigned char magic[4];
  int64_t got = read_some(f.get(), magic, 4, who, path);
  LOOM_CHECK(got == 4, who, ": ", path, " is truncated: ", got,
             " bytes, too short for the 4-byte idx magic number");
  const uint32_t want = 0x0800u | uint32_t(expected_ndim);
  LOOM_CHECK(big_endian32(magic) == want, who, ": ", path, " has a bad magic number ",
             hex32(big_endian32(magic)), " (expected ", hex32(want),
             ": an idx file of unsigned bytes with ", expected_ndim, " dims)");
  std::vector<unsigned char> dims_raw(size_t(4 * expected_ndim));
  got = read_some(f.get(), dims_raw.data(), int64_t(dims_raw.size()), who, path);
  LOOM_CHECK(got == int64_t(dims_raw.size()), who, ": ", path, " is truncated inside its header (",
             got, " of ", dims_raw.size(), " bytes of sizes)");
  Shape dims;
  int64_t total = 1, bound = 1;  // bound: the product with zero sizes read as one
  for (int d = 0; d < expected_ndim; ++d) {
    uint32_t v = big_endian32(&dims_raw[size_t(4 * d)]);
    LOOM_CHECK(v <= uint32_t(std::numeric_limits<int32_t>::max()) &&
                   bound <= (int64_t(1) << 40) / std::max(1u, v),
               who, ": ", path, " declares an implausible size ", v, " in dim ", d);
    dims.push_back(int64_t(v));
    total *= int64_t(v);
    bound *= int64_t(std::max(1u, v));
  }

  // Note [Idx sizes]: the header's sizes are not trusted with memory: a 34-byte file can declare
  // 42 GB (found by tests/fuzz/idx_fuzz.cpp; the input is in tests/fuzz/regressions/idx). Data
  // of more than kIdxFirst bytes is read in chunks that double from kIdxFirst up to kIdxChunk,
  // each allocated only after the previous one arrived in full, so memory stays within about
  // twice what the file really holds; the tensor is allocated last.
  constexpr int64_t kIdxFirst = int64_t(1) << 20, kIdxChunk = int64_t(64) << 20;
  Tensor out;
  if (total <= kIdxFirst) {
    out = empty(dims, {.dtype = kU8});
    got = read_some(f.get(), out.data_ptr(), total, who, path);
  } else {
    std::vector<unsigned char> buf;
    got = 0;
    while (got < total) {
      const int64_t want = std::min({std::max(got, kIdxFirst), kIdxChunk, total - got});
      buf.resize(size_t(got + want));
      const int64_t k = read_some(f.get(), buf.data() + got, want, who, path);
      got += k;
      if (k < want) break;
    }
    if (got == total) {
      out = empty(dims, {.dtype = kU8});
      std::memcpy(out.data_ptr(), buf.data(), size_t(total));
    }
  }
  LOOM_CHECK(got == total, who, ": ", path, " is truncated: its header declares ", dims, " = ",
             total, " bytes of data, but only ", got, " follow");
  unsigned char extra;
  LOOM_CHECK(read_some(f.get(), &extra, 1, who, path) == 0, who, ": ", path,
             " has bytes after the ", total, " its header declares ", dims,
             " (not an idx file, or two concatenated)");
  return out;
}

// ---------------------------------------------------------------- MNIST

MNIST::MNIST(const std::string& root, bool train, MnistNormalization norm)
    : MNIST("MNIST", root, train, norm) {}

MNIST::MNIST(const std::string& what, const std::string& root, bool train, MnistNormalization norm)
    : norm_(norm) {
  LOOM_CHECK(norm.std > 0.0f, what, ": normalisation std ", norm.std, " must be positive");
  for (int v = 0; v < 256; ++v) lut_[v] = (float(v) / 255.0f - norm.mean) / norm.std;
  load(what, root, train);
}

void MNIST::load(const std::string& what, const std::string& root, bool train) {
  const std::string split = train ? "train" : "t10k";
  const std::string who = what + " (" + (train ? "train" : "test") + " split)";
  const std::string images_path = find_file(who, root, split + "-images-idx3-ubyte");
  const std::string labels_path = find_file(who, root, split + "-labels-idx1-ubyte");
  images_ = read_idx_u8(images_path, 3, who);
  Tensor raw_labels = read_idx_u8(labels_path, 1, who);
  const int64_t n = images_.size(0), nl = raw_labels.size(0);
  LOOM_CHECK(n == nl, who, ": ", images_path, " holds ", n, " images but ", labels_path, " holds ",
             nl, " labels (the counts must match)");
  LOOM_CHECK(images_.size(1) > 0 && images_.size(2) > 0, who, ": ", images_path,
             " has images of size ", images_.size(1), "x", images_.size(2));
  labels_ = empty({n}, {.dtype = kI64});
  const uint8_t* src = raw_labels.data<uint8_t>();
  int64_t* dst = labels_.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    LOOM_CHECK(src[i] < 10, who, ": ", labels_path, ": label ", int(src[i]), " at index ", i,
               " is out of range [0, 10)");
    dst[i] = src[i];
  }
}

Example MNIST::get(int64_t index) const {
  LOOM_CHECK(index >= 0 && index < size(), "MNIST::get: index ", index, " is out of range for ",
             size(), " examples");
  const int64_t h = images_.size(1), w = images_.size(2);
  Tensor data = empty({1, h, w}, {.dtype = kF32});
  const uint8_t* px = images_.data<uint8_t>() + index * h * w;
  float* out = data.data<float>();
  for (int64_t i = 0; i < h * w; ++i) out[i] = lut_[px[i]];
  Tensor target = empty({}, {.dtype = kI64});
  *target.data<int64_t>() = labels_.data<int64_t>()[index];
  return {data, target};
}

std::optional<ExampleSpec> MNIST::spec() const {
  return ExampleSpec{{1, images_.size(1), images_.size(2)}, kF32, {}, kI64, true};
}

void MNIST::gather(std::span<const int64_t> indices, const Tensor& data,
                   const Tensor& target) const {
  const int64_t b = int64_t(indices.size()), hw = images_.size(1) * images_.size(2);
  LOOM_CHECK(data.dtype() == kF32 && data.is_contiguous() && data.numel() == b * hw &&
                 target.dtype() == kI64 && target.numel() == b,
             "MNIST::gather: ", b, " examples into data ", describe(data), " and target ",
             describe(target));
  const uint8_t* px = images_.data<uint8_t>();
  const int64_t* lab = labels_.data<int64_t>();
  float* out = data.data<float>();
  int64_t* tout = target.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    const int64_t r = indices[size_t(i)];
    LOOM_CHECK(r >= 0 && r < size(), "MNIST::gather: index ", r, " is out of range for ", size(),
               " examples");
    const uint8_t* src = px + r * hw;
    float* dst = out + i * hw;
    for (int64_t j = 0; j < hw; ++j) dst[j] = lut_[src[j]];
    tout[i] = lab[r];
  }
}

Tensor MNIST::float_images(bool normalize) const {
  const int64_t n = images_.size(0), h = images_.size(1), w = images_.size(2);
  Tensor out = empty({n, 1, h, w}, {.dtype = kF32});
  float table[256];
  for (int v = 0; v < 256; ++v) table[v] = normalize ? lut_[v] : float(v) / 255.0f;
  const uint8_t* src = images_.data<uint8_t>();
  float* dst = out.data<float>();
  cpu::parallel_for(0, n * h * w, cpu::kGrainSize, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dst[i] = table[src[i]];
  });
  return out;
}

TensorDataset MNIST::to_tensor_dataset(bool normalize) const {
  return TensorDataset(float_images(normalize), labels_);
}

// ---------------------------------------------------------------- FashionMNIST

FashionMNIST::FashionMNIST(const std::string& root, bool train)
    : MNIST("FashionMNIST", root, train, kFashionMnistNormalization) {}

}  // namespace loom::data
