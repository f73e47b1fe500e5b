// Transforms: per-sample RNG, Normalize, RandomCrop, RandomHorizontalFlip, Compose.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/raw_ops.h"

namespace loom::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// (C, H, W) or (H, W) -> {C, H, W} with C = 1 for the 2-d case.
std::array<int64_t, 3> chw(const std::string& who, const Shape& s) {
  LOOM_CHECK(s.size() == 2 || s.size() == 3, who,
             ": expected an image of shape (C, H, W) or (H, W), got ", s);
  if (s.size() == 2) return {1, s[0], s[1]};
  return {s[0], s[1], s[2]};
}

Shape with_hw(const Shape& in, int64_t h, int64_t w) {
  Shape out = in;
  out[out.size() - 2] = h;
  out[out.size() - 1] = w;
  return out;
}

}  // namespace

// ---------------------------------------------------------------- SampleRng

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index)
    : key_(splitmix64(seed ^ splitmix64(uint64_t(epoch)))), index_(uint64_t(index)) {}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) {
    buf_ = philox4x32(key_, index_, block_++);
    used_ = 0;
  }
  return buf_.v[used_++];
}

double SampleRng::uniform() { return double(next_u32()) * (1.0 / 4294967296.0); }

int64_t SampleRng::randint(int64_t lo, int64_t hi) {
  LOOM_CHECK(lo <= hi, "SampleRng::randint: empty range [", lo, ", ", hi, "]");
  uint64_t span = uint64_t(hi - lo) + 1;  // at most 2^32 in practice (image sizes)
  return lo + int64_t((uint64_t(next_u32()) * span) >> 32);
}

// ---------------------------------------------------------------- Transform

Tensor Transform::operator()(const Tensor& x, SampleRng& rng) const {
  LOOM_CHECK(x.dtype() == kF32 && x.device().is_cpu(), name(),
             ": expects a float32 CPU tensor, got ", describe(x));
  Tensor in = raw::contiguous(x);
  Tensor out = empty(output_shape(in.shape()), {.dtype = kF32});
  apply(in.data<float>(), in.shape(), out.data<float>(), rng);
  return out;
}

// ---------------------------------------------------------------- Normalize

Normalize::Normalize(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)) {
  LOOM_CHECK(!mean_.empty() && mean_.size() == std.size(), "Normalize: mean has ", mean_.size(),
             " values and std has ", std.size(),
             " (expected the same non-zero number, one per channel)");
  for (float s : std) {
    LOOM_CHECK(s > 0.0f && std::isfinite(s), "Normalize: std ", s, " must be positive and finite");
    inv_std_.push_back(1.0f / s);
  }
}

Shape Normalize::output_shape(const Shape& in) const {
  if (mean_.size() > 1)
    LOOM_CHECK(!in.empty() && in[0] == int64_t(mean_.size()), "Normalize: ", mean_.size(),
               " channel means for an example of shape ", in, " (channels are dim 0)");
  return in;
}

void Normalize::apply(const float* in, const Shape& in_shape, float* out, SampleRng&) const {
  output_shape(in_shape);
  const int64_t n = numel(in_shape);
  const int64_t channels = int64_t(mean_.size());
  const int64_t per = channels > 1 ? n / channels : n;
  for (int64_t c = 0; c < channels; ++c) {
    const float m = mean_[size_t(c)], s = inv_std_[size_t(c)];
    const float* src = in + c * per;
    float* dst = out + c * per;
    for (int64_t i = 0; i < per; ++i) dst[i] = (src[i] - m) * s;
  }
}

// ---------------------------------------------------------------- RandomCrop

RandomCrop::RandomCrop(std::array<int64_t, 2> size, int64_t padding, float fill)
    : size_(size), padding_(padding), fill_(fill) {
  LOOM_CHECK(size[0] > 0 && size[1] > 0, "RandomCrop: size (", size[0], ", ", size[1],
             ") must be positive");
  LOOM_CHECK(padding >= 0, "RandomCrop: padding ", padding, " is negative");
}

Shape RandomCrop::output_shape(const Shape& in) const {
  auto [c, h, w] = chw("RandomCrop", in);
  (void)c;
  LOOM_CHECK(size_[0] <= h + 2 * padding_ && size_[1] <= w + 2 * padding_, "RandomCrop: crop (",
             size_[0], ", ", size_[1], ") is larger than the padded image (", h + 2 * padding_,
             ", ", w + 2 * padding_, ") of an example of shape ", in);
  return with_hw(in, size_[0], size_[1]);
}

void RandomCrop::apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const {
  output_shape(in_shape);
  auto [c, h, w] = chw("RandomCrop", in_shape);
  const int64_t oh = size_[0], ow = size_[1];
  // Top-left corner of the window in padded coordinates, then shifted back into the image's.
  const int64_t top = rng.randint(0, h + 2 * padding_ - oh) - padding_;
  const int64_t left = rng.randint(0, w + 2 * padding_ - ow) - padding_;
  // Columns of the window that fall inside the image: [x0, x1) in window coordinates.
  const int64_t x0 = std::clamp<int64_t>(-left, 0, ow), x1 = std::clamp<int64_t>(w - left, 0, ow);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < oh; ++y) {
      float* dst = out + (ch * oh + y) * ow;
      const int64_t sy = top + y;
      if (sy < 0 || sy >= h || x0 >= x1) {
        std::fill(dst, dst + ow, fill_);
        continue;
      }
      std::fill(dst, dst + x0, fill_);
      std::memcpy(dst + x0, in + (ch * h + sy) * w + (left + x0), size_t(x1 - x0) * sizeof(float));
      std::fill(dst + x1, dst + ow, fill_);
    }
  }
}

// ---------------------------------------------------------------- RandomHorizontalFlip

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: probability ", p, " is outside [0, 1]");
}

Shape RandomHorizontalFlip::output_shape(const Shape& in) const {
  LOOM_CHECK(!in.empty(), "RandomHorizontalFlip: a 0-d example has no width to flip");
  return in;
}

void RandomHorizontalFlip::apply(const float* in, const Shape& in_shape, float* out,
                                 SampleRng& rng) const {
  output_shape(in_shape);
  const int64_t w = in_shape.back();
  const int64_t rows = w == 0 ? 0 : numel(in_shape) / w;
  const bool flip = rng.uniform() < p_;  // always draw, so later transforms see the same stream
  if (!flip) {
    std::memcpy(out, in, size_t(rows * w) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::reverse_copy(in + r * w, in + (r + 1) * w, out + r * w);
}

// ---------------------------------------------------------------- Compose

Compose::Compose(std::vector<std::shared_ptr<const Transform>> ts) : ts_(std::move(ts)) {
  for (size_t i = 0; i < ts_.size(); ++i)
    LOOM_CHECK(ts_[i] != nullptr, "Compose: transform ", i, " is null");
}

std::string Compose::name() const {
  std::string s = "Compose(";
  for (size_t i = 0; i < ts_.size(); ++i) s += (i ? ", " : "") + ts_[i]->name();
  return s + ")";
}

Shape Compose::output_shape(const Shape& in) const {
  Shape s = in;
  for (const auto& t : ts_) s = t->output_shape(s);
  return s;
}

void Compose::apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const {
  if (ts_.empty()) {
    std::memcpy(out, in, size_t(numel(in_shape)) * sizeof(float));
    return;
  }
  // Ping-pong between two scratch buffers (per call, so a nested Compose is safe); the last
  // transform writes `out`.
  std::vector<float> scratch[2];
  const float* src = in;
  Shape shape = in_shape;
  for (size_t i = 0; i < ts_.size(); ++i) {
    Shape next = ts_[i]->output_shape(shape);
    float* dst = out;
    if (i + 1 < ts_.size()) {
      std::vector<float>& buf = scratch[i % 2];
      buf.resize(size_t(numel(next)));
      dst = buf.data();
    }
    ts_[i]->apply(src, shape, dst, rng);
    src = dst;
    shape = std::move(next);
  }
}

}  // namespace loom::data
