// MNIST and Fashion-MNIST: the idx file reader (gzip through zlib, plain files too) and the
// datasets built on it: uint8 images (N, 28, 28), int64 labels (N), examples normalised as
// torchvision's ToTensor + Normalize would.
// Leaves out: downloading (Fashion-MNIST comes from the Debian package dataset-fashion-mnist).
#pragma once

#include <string>

#include "data/dataset.h"

namespace loom::data {

// An idx file of unsigned bytes (type code 0x08): the dims from its header and the data as a
// uint8 tensor of those dims. `expected_ndim` is checked through the magic number (0x0801 for
// labels, 0x0803 for images). Errors name the file and what is wrong: missing, bad magic,
// truncated, trailing bytes, gzip corruption; `who` starts the message.
Tensor read_idx_u8(const std::string& path, int expected_ndim,
                   const std::string& who = "read_idx_u8");

struct MnistNormalization {
  float mean, std;
};
inline constexpr MnistNormalization kMnistNormalization{0.1307f, 0.3081f};
inline constexpr MnistNormalization kFashionMnistNormalization{0.2860f, 0.3530f};

// The train (60000) or test (10000) split of an MNIST-format dataset in `root`:
// {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz].
// get(i) returns data float32 (1, 28, 28) = (pixel / 255 - mean) / std and target int64 ().
class MNIST : public Dataset {
 public:
  MNIST(const std::string& root, bool train = true, MnistNormalization norm = kMnistNormalization);

  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  std::optional<ExampleSpec> spec() const override;
  void gather(std::span<const int64_t> indices, const Tensor& data,
              const Tensor& target) const override;

  const Tensor& images() const { return images_; }  // uint8 (N, H, W)
  const Tensor& labels() const { return labels_; }  // int64 (N), values in [0, 10)
  MnistNormalization normalization() const { return norm_; }

  // The whole split at once: float32 (N, 1, H, W), (pixel / 255 - mean) / std, or pixel / 255
  // when normalize is false (then apply Normalize after the random crops, as torchvision does).
  Tensor float_images(bool normalize = true) const;
  // TensorDataset{float_images(normalize), labels()}: the fast way to feed a loader or a GPU.
  TensorDataset to_tensor_dataset(bool normalize = true) const;

 protected:
  MNIST(const std::string& what, const std::string& root, bool train, MnistNormalization norm);

 private:
  void load(const std::string& what, const std::string& root, bool train);
  Tensor images_, labels_;
  MnistNormalization norm_;
  float lut_[256];  // pixel value -> normalised float
};

// Fashion-MNIST (Zalando): same format, clothing classes, its own mean/std.
class FashionMNIST final : public MNIST {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  explicit FashionMNIST(const std::string& root = kDefaultRoot, bool train = true);
};

}  // namespace loom::data
