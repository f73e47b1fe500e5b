// Per-example transforms run by the DataLoader's workers: Normalize, RandomCrop (with zero
// padding), RandomHorizontalFlip, and Compose. Randomness comes from a SampleRng derived from
// (seed, epoch, dataset index), so a sample's augmentation never depends on thread scheduling,
// on num_workers, or on where the sample lands in a batch.
// Leaves out: colour and affine augmentations, and any transform that is not float32 -> float32.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/philox.h"
#include "core/tensor.h"

namespace loom::data {

// The random stream of one sample in one epoch: Philox keyed by (seed, epoch), counter = the
// dataset index, so two samples (or two epochs) never share numbers.
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  uint32_t next_u32();
  double uniform();                         // [0, 1), 32 random bits
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi], both ends included

 private:
  uint64_t key_, index_;
  uint64_t block_ = 0;
  Philox4 buf_{};
  int used_ = 4;
};

// One example as the transforms see it: float32, contiguous, shape (C, H, W) or (H, W) for the
// image transforms, any shape for Normalize.
class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::string name() const = 0;
  // The output shape for an input shape; the error names the transform and the shape.
  virtual Shape output_shape(const Shape& in) const { return in; }
  // Reads numel(in_shape) floats at `in`, writes numel(output_shape(in_shape)) floats at `out`
  // (never the same memory).
  virtual void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const = 0;

  // Convenience for one tensor (tests, single images): a new float32 CPU tensor.
  Tensor operator()(const Tensor& x, SampleRng& rng) const;
};

// (x - mean[c]) / std[c] over channel c = dim 0 of a (C, ...) example; one value applies to all.
class Normalize final : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  std::string name() const override { return "Normalize"; }
  Shape output_shape(const Shape& in) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  std::vector<float> mean_, inv_std_;
};

// Pads H and W by `padding` on every side with `fill`, then cuts a (size[0], size[1]) window at
// a uniformly random position (torchvision's RandomCrop(size, padding)).
class RandomCrop final : public Transform {
 public:
  RandomCrop(std::array<int64_t, 2> size, int64_t padding = 0, float fill = 0.0f);
  RandomCrop(int64_t size, int64_t padding = 0, float fill = 0.0f)
      : RandomCrop({size, size}, padding, fill) {}
  std::string name() const override { return "RandomCrop"; }
  Shape output_shape(const Shape& in) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  std::array<int64_t, 2> size_;
  int64_t padding_;
  float fill_;
};

// Mirrors W (the last dim) with probability p.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  std::string name() const override { return "RandomHorizontalFlip"; }
  Shape output_shape(const Shape& in) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  double p_;
};

// Runs transforms in order, all drawing from the one SampleRng of the sample.
class Compose final : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> ts);
  std::string name() const override;
  Shape output_shape(const Shape& in) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  std::vector<std::shared_ptr<const Transform>> ts_;
};

}  // namespace loom::data
