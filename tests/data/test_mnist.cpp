// data/mnist: the idx reader on the real Fashion-MNIST files (checked against bytes read here
// with zlib directly) and every error case on small files written to a temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/allocator.h"
#include "data/mnist.h"
#include "support/errors.h"
#include "support/fashion_mnist.h"

using namespace loom;
using namespace loom::data;
using loom::test::error_of;
namespace fs = std::filesystem;

namespace {

// The whole decompressed file, read with zlib here (independent of the reader under test).
std::vector<uint8_t> gunzip_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::vector<uint8_t> out;
  if (!f) return out;
  uint8_t buf[1 << 16];
  int r;
  while ((r = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + r);
  gzclose(f);
  return out;
}

// An idx file: magic (0, 0, 8, ndim), big-endian sizes, then the bytes; gzip or plain.
std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data,
                               uint32_t magic = 0) {
  if (magic == 0) magic = 0x0800u | uint32_t(dims.size());
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_file(const fs::path& p, const std::vector<uint8_t>& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    ASSERT_NE(f, nullptr) << p;
    if (!bytes.empty()) {
      ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    }
    gzclose(f);
  } else {
    std::ofstream o(p, std::ios::binary);
    o.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
}

std::vector<uint8_t> iota_bytes(size_t n, int mul = 7) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t((i * size_t(mul)) % 256);
  return v;
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("loom_test_mnist_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small valid split: n images of h x w and n labels (values i % 10), gzip or plain.
  void write_split(const std::string& split, uint32_t n, uint32_t h, uint32_t w, bool gz) {
    std::string ext = gz ? ".gz" : "";
    write_file(dir_ / (split + "-images-idx3-ubyte" + ext),
               idx_bytes({n, h, w}, iota_bytes(size_t(n) * h * w)), gz);
    std::vector<uint8_t> labels(n);
    for (uint32_t i = 0; i < n; ++i) labels[i] = uint8_t(i % 10);
    write_file(dir_ / (split + "-labels-idx1-ubyte" + ext), idx_bytes({n}, labels), gz);
  }

  fs::path dir_;
};

}  // namespace

// ---------------------------------------------------------------- the real files

TEST(FashionMnist, TrainSplitMatchesRawBytes) {
  LOOM_FASHION_MNIST_OR_SKIP(kRoot);
  auto t0 = std::chrono::steady_clock::now();
  FashionMNIST train(kRoot);  // train split
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ load ] Fashion-MNIST train split (60000 images, gzip) loaded in %.3f s\n", secs);
  RecordProperty("load_seconds", std::to_string(secs));

  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.images().shape(), (Shape{60000, 28, 28}));
  EXPECT_EQ(train.images().dtype(), kU8);
  EXPECT_EQ(train.labels().shape(), (Shape{60000}));
  EXPECT_EQ(train.labels().dtype(), kI64);

  std::vector<int64_t> hist(10, 0);
  const int64_t* lab = train.labels().data<int64_t>();
  for (int64_t i = 0; i < 60000; ++i) {
    ASSERT_TRUE(lab[i] >= 0 && lab[i] < 10);
    hist[size_t(lab[i])]++;
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(hist[size_t(c)], 6000) << "class " << c;

  // Labels and pixels against the raw bytes (8-byte label header, 16-byte image header).
  std::vector<uint8_t> raw_labels = gunzip_file(kRoot + "/train-labels-idx1-ubyte.gz");
  ASSERT_EQ(raw_labels.size(), 60008u);
  EXPECT_EQ(raw_labels[3], 0x01);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(lab[i], raw_labels[size_t(8 + i)]) << i;
  EXPECT_EQ(lab[0], 9);  // the first training example is an ankle boot
  EXPECT_EQ(lab[59999], raw_labels[8 + 59999]);
  std::vector<uint8_t> raw_images = gunzip_file(kRoot + "/train-images-idx3-ubyte.gz");
  ASSERT_EQ(raw_images.size(), 16u + 60000u * 784u);
  const uint8_t* px = train.images().data<uint8_t>();
  EXPECT_EQ(std::memcmp(px, raw_images.data() + 16, raw_images.size() - 16), 0);
}

TEST(FashionMnist, TestSplitHistogram) {
  LOOM_FASHION_MNIST_OR_SKIP(kRoot);
  FashionMNIST test(kRoot, /*train=*/false);
  ASSERT_EQ(test.size(), 10000);
  std::vector<int64_t> hist(10, 0);
  for (int64_t v : test.labels().to_vector<int64_t>()) hist[size_t(v)]++;
  for (int c = 0; c < 10; ++c) EXPECT_EQ(hist[size_t(c)], 1000) << "class " << c;
  std::vector<uint8_t> raw = gunzip_file(kRoot + "/t10k-labels-idx1-ubyte.gz");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(test.labels().data<int64_t>()[i], raw[size_t(8 + i)]);
}

TEST(FashionMnist, NormalisationGetGatherAndWholeSetAgree) {
  LOOM_FASHION_MNIST_OR_SKIP(kRoot);
  FashionMNIST train(kRoot);
  const uint8_t* px = train.images().data<uint8_t>();
  Tensor whole = train.float_images();
  ASSERT_EQ(whole.shape(), (Shape{60000, 1, 28, 28}));
  const float* w = whole.data<float>();
  std::vector<int64_t> idx = {0, 1, 12345, 59999, 7};
  Tensor gd = empty({5, 1, 28, 28}), gt = empty({5}, {.dtype = kI64});
  train.gather(idx, gd, gt);
  for (size_t k = 0; k < idx.size(); ++k) {
    const int64_t i = idx[k];
    Example e = train.get(i);
    ASSERT_EQ(e.data.shape(), (Shape{1, 28, 28}));
    ASSERT_EQ(e.target.dim(), 0);
    EXPECT_EQ(e.target.item<int64_t>(), train.labels().data<int64_t>()[i]);
    EXPECT_EQ(gt.data<int64_t>()[k], train.labels().data<int64_t>()[i]);
    for (int64_t j = 0; j < 784; ++j) {
      const double want = (double(px[i * 784 + j]) / 255.0 - 0.2860) / 0.3530;
      ASSERT_NEAR(e.data.data<float>()[j], want, 1e-5) << i << "," << j;
      ASSERT_EQ(e.data.data<float>()[j], w[i * 784 + j]);
      ASSERT_EQ(gd.data<float>()[int64_t(k) * 784 + j], w[i * 784 + j]);
    }
  }
  // The published statistics hold for the train split: raw mean 0.2860, std 0.3530.
  Tensor raw01 = train.float_images(/*normalize=*/false);
  double s = 0, s2 = 0;
  const float* r = raw01.data<float>();
  for (int64_t i = 0; i < raw01.numel(); ++i) {
    s += r[i];
    s2 += double(r[i]) * r[i];
  }
  const double mean = s / double(raw01.numel()),
               sd = std::sqrt(s2 / double(raw01.numel()) - mean * mean);
  EXPECT_NEAR(mean, 0.2860, 1e-4);
  EXPECT_NEAR(sd, 0.3530, 1e-3);
  TensorDataset td = train.to_tensor_dataset();
  EXPECT_EQ(td.size(), 60000);
  EXPECT_EQ(td.get(12345).target.item<int64_t>(), train.labels().data<int64_t>()[12345]);
}

// ---------------------------------------------------------------- small files, good and bad

TEST_F(TempDir, ReadsPlainAndGzipFilesAlike) {
  write_split("train", 12, 5, 4, /*gz=*/false);
  write_split("t10k", 3, 5, 4, /*gz=*/true);
  MNIST train(dir_.string(), true), test(dir_.string(), false);
  ASSERT_EQ(train.size(), 12);
  ASSERT_EQ(test.size(), 3);
  std::vector<uint8_t> want = iota_bytes(12 * 20);
  EXPECT_EQ(train.images().shape(), (Shape{12, 5, 4}));
  EXPECT_EQ(std::memcmp(train.images().data<uint8_t>(), want.data(), want.size()), 0);
  EXPECT_EQ(std::memcmp(test.images().data<uint8_t>(), want.data(), 60), 0);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(train.labels().data<int64_t>()[i], i % 10);
  // MNIST's own normalisation.
  Example e = train.get(1);
  EXPECT_NEAR(e.data.data<float>()[3], (double(want[23]) / 255.0 - 0.1307) / 0.3081, 1e-5);
  // read_idx_u8 by itself.
  Tensor t = read_idx_u8((dir_ / "t10k-labels-idx1-ubyte.gz").string(), 1);
  EXPECT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.to_vector<uint8_t>(), (std::vector<uint8_t>{0, 1, 2}));
}

TEST_F(TempDir, MissingFileNamesItAndThePackage) {
  std::string msg = error_of([&] { FashionMNIST ds(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "train-images-idx3-ubyte.gz").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
  // Images present, labels missing: the labels file is named.
  write_file(dir_ / "train-images-idx3-ubyte.gz", idx_bytes({2, 2, 2}, iota_bytes(8)), true);
  msg = error_of([&] { MNIST ds(dir_.string()); });
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
}

TEST_F(TempDir, BadMagicNumber) {
  write_split("train", 4, 2, 2, true);
  // A labels file where the images file should be (magic 0x00000801 instead of 0x00000803).
  write_file(dir_ / "train-images-idx3-ubyte.gz", idx_bytes({4}, iota_bytes(4)), true);
  std::string msg = error_of([&] { MNIST ds(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "train-images-idx3-ubyte.gz").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic number 0x00000801"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000803"), std::string::npos) << msg;
  // Not unsigned bytes (type code 0x0d: float).
  write_file(dir_ / "x.idx", idx_bytes({4}, iota_bytes(16), 0x00000d01), false);
  msg = error_of([&] { read_idx_u8((dir_ / "x.idx").string(), 1); });
  EXPECT_NE(msg.find("bad magic number 0x00000d01"), std::string::npos) << msg;
}

TEST_F(TempDir, TruncatedData) {
  write_split("train", 10, 3, 3, true);
  // Header says 10 images of 3x3 (90 bytes), only 85 follow.
  std::vector<uint8_t> bytes = idx_bytes({10, 3, 3}, iota_bytes(90));
  bytes.resize(bytes.size() - 5);
  write_file(dir_ / "train-images-idx3-ubyte.gz", bytes, true);
  std::string msg = error_of([&] { MNIST ds(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "train-images-idx3-ubyte.gz").string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("90 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("only 85"), std::string::npos) << msg;
  // Truncated inside the header, plain file.
  write_file(dir_ / "h.idx", {0, 0, 8, 3, 0, 0}, false);
  msg = error_of([&] { read_idx_u8((dir_ / "h.idx").string(), 3); });
  EXPECT_NE(msg.find("truncated inside its header"), std::string::npos) << msg;
  // An empty file.
  write_file(dir_ / "e.idx", {}, false);
  msg = error_of([&] { read_idx_u8((dir_ / "e.idx").string(), 1); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("e.idx"), std::string::npos) << msg;
}

TEST_F(TempDir, TruncatedGzipStream) {
  // A valid gzip file cut in the middle of its compressed stream: an error naming the file,
  // whichever way zlib reports it (short data or a stream error), never garbage or a crash.
  std::mt19937 rng(3);
  std::vector<uint8_t> px(50 * 28 * 28);
  for (auto& v : px) v = uint8_t(rng());  // incompressible, so the cut lands inside the data
  write_file(dir_ / "big.gz", idx_bytes({50, 28, 28}, px), true);
  auto size = fs::file_size(dir_ / "big.gz");
  fs::resize_file(dir_ / "big.gz", size / 2);
  std::string msg = error_of([&] { read_idx_u8((dir_ / "big.gz").string(), 3); });
  EXPECT_NE(msg.find("big.gz"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
              msg.find("cannot read") != std::string::npos)
      << msg;
}

TEST_F(TempDir, AHugeDeclaredSizeIsNotAllocated) {
  // Note [Idx sizes]: 4 data bytes under a header declaring 1000 x 1000 x 1000 (1 GB), plain
  // and gzip: a truncation error, and no tensor allocated for the data that never came.
  for (bool gz : {false, true}) {
    std::string name = gz ? "huge.idx.gz" : "huge.idx";
    write_file(dir_ / name, idx_bytes({1000, 1000, 1000}, {1, 2, 3, 4}), gz);
    CpuAllocStats before = cpu_alloc_stats();
    std::string msg = error_of([&] { read_idx_u8((dir_ / name).string(), 3); });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    EXPECT_NE(msg.find("only 4 follow"), std::string::npos) << msg;
    EXPECT_EQ(cpu_alloc_stats().bytes - before.bytes, 0u) << "a tensor was allocated";
  }
  // A zero size does not excuse the others: [0, 2^31-1, 2^31-1] is implausible, not a tensor
  // whose strides overflow (tests/fuzz/regressions/idx/zero-dim-then-huge-dims).
  write_file(dir_ / "zero.idx", idx_bytes({0, 0x7fffffffu, 0x7fffffffu}, {}), false);
  std::string zero_msg = error_of([&] { read_idx_u8((dir_ / "zero.idx").string(), 3); });
  EXPECT_NE(zero_msg.find("implausible size 2147483647 in dim 2"), std::string::npos) << zero_msg;
  // Whole files over the largest chunk (64 MiB) are read right.
  const int64_t n = (int64_t(64) << 20) + 3;
  std::vector<uint8_t> px(static_cast<size_t>(n));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7);
  write_file(dir_ / "big.idx", idx_bytes({uint32_t(n)}, px), false);
  Tensor t = read_idx_u8((dir_ / "big.idx").string(), 1);
  ASSERT_EQ(t.numel(), n);
  EXPECT_EQ(std::memcmp(t.data<uint8_t>(), px.data(), px.size()), 0);
}

TEST_F(TempDir, TrailingBytes) {
  std::vector<uint8_t> bytes = idx_bytes({4}, {1, 2, 3, 4});
  bytes.push_back(5);
  write_file(dir_ / "t.idx", bytes, false);
  std::string msg = error_of([&] { read_idx_u8((dir_ / "t.idx").string(), 1); });
  EXPECT_NE(msg.find("t.idx"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bytes after"), std::string::npos) << msg;
}

TEST_F(TempDir, CountMismatch) {
  write_split("train", 10, 2, 2, true);
  write_file(dir_ / "train-labels-idx1-ubyte.gz", idx_bytes({9}, iota_bytes(9, 1)), true);
  std::string msg = error_of([&] { MNIST ds(dir_.string()); });
  EXPECT_NE(msg.find("10 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-labels-idx1-ubyte.gz"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
}

TEST_F(TempDir, LabelOutOfRange) {
  write_split("t10k", 6, 2, 2, false);
  write_file(dir_ / "t10k-labels-idx1-ubyte", idx_bytes({6}, {0, 1, 2, 10, 4, 5}), false);
  std::string msg = error_of([&] { MNIST ds(dir_.string(), /*train=*/false); });
  EXPECT_NE(msg.find("t10k-labels-idx1-ubyte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 10 at index 3 is out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test split"), std::string::npos) << msg;
}
