// data/transforms: the per-sample RNG, Normalize, RandomCrop (checked against a padded image
// built here), RandomHorizontalFlip and Compose.
#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "data/transforms.h"

using namespace loom;
using namespace loom::data;

namespace {

// A (C, H, W) float tensor with distinct positive values: value(c, y, x) = 1 + c*1000 + y*100 + x.
Tensor image(int64_t c, int64_t h, int64_t w) {
  std::vector<float> v;
  for (int64_t ci = 0; ci < c; ++ci)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) v.push_back(float(1 + ci * 1000 + y * 100 + x));
  return from_vector(v, {c, h, w});
}

float at(const Tensor& t, int64_t c, int64_t y, int64_t x) {
  return t.data<float>()[(c * t.size(1) + y) * t.size(2) + x];
}

// x (C, H, W) padded by P on every side with `fill`, built naively: (C, H + 2P, W + 2P) row-major.
std::vector<float> pad_image(const Tensor& x, int64_t P, float fill) {
  const int64_t C = x.size(0), H = x.size(1), W = x.size(2), PH = H + 2 * P, PW = W + 2 * P;
  std::vector<float> padded(size_t(C * PH * PW), fill);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t w = 0; w < W; ++w)
        padded[size_t((c * PH + y + P) * PW + w + P)] = at(x, c, y, w);
  return padded;
}

// The (top, left) corners of every window of `padded` (C, PH, PW) equal to out (C, SH, SW).
std::vector<std::pair<int64_t, int64_t>> matching_windows(const Tensor& out,
                                                          const std::vector<float>& padded,
                                                          int64_t PH, int64_t PW) {
  const int64_t C = out.size(0), SH = out.size(1), SW = out.size(2);
  std::vector<std::pair<int64_t, int64_t>> found;
  for (int64_t top = 0; top + SH <= PH; ++top)
    for (int64_t left = 0; left + SW <= PW; ++left) {
      bool match = true;
      for (int64_t c = 0; c < C && match; ++c)
        for (int64_t y = 0; y < SH && match; ++y)
          for (int64_t w = 0; w < SW && match; ++w)
            match = at(out, c, y, w) == padded[size_t((c * PH + top + y) * PW + left + w)];
      if (match) found.emplace_back(top, left);
    }
  return found;
}

}  // namespace

TEST(SampleRng, DependsOnlyOnSeedEpochAndIndex) {
  auto draw = [](uint64_t seed, int64_t epoch, int64_t index) {
    SampleRng r(seed, epoch, index);
    std::vector<uint32_t> v;
    for (int i = 0; i < 9; ++i) v.push_back(r.next_u32());  // crosses a Philox block
    return v;
  };
  EXPECT_EQ(draw(1, 2, 3), draw(1, 2, 3));
  EXPECT_NE(draw(1, 2, 3), draw(1, 2, 4));
  EXPECT_NE(draw(1, 2, 3), draw(1, 3, 3));
  EXPECT_NE(draw(1, 2, 3), draw(2, 2, 3));
  std::vector<uint32_t> v = draw(1, 2, 3);
  EXPECT_EQ(std::set<uint32_t>(v.begin(), v.end()).size(), v.size());
  SampleRng r(0, 0, 0);
  std::set<int64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    int64_t k = r.randint(-2, 2);
    ASSERT_TRUE(k >= -2 && k <= 2);
    seen.insert(k);
    double u = r.uniform();
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
  }
  EXPECT_EQ(seen.size(), 5u);
}

TEST(Transforms, NormalizePerChannel) {
  Tensor x = image(2, 3, 4);
  SampleRng rng(0, 0, 0);
  Tensor y = Normalize({1.0f, 2.0f}, {0.5f, 4.0f})(x, rng);
  ASSERT_EQ(y.shape(), x.shape());
  for (int64_t y0 = 0; y0 < 3; ++y0)
    for (int64_t x0 = 0; x0 < 4; ++x0) {
      EXPECT_FLOAT_EQ(at(y, 0, y0, x0), (at(x, 0, y0, x0) - 1.0f) / 0.5f);
      EXPECT_FLOAT_EQ(at(y, 1, y0, x0), (at(x, 1, y0, x0) - 2.0f) / 4.0f);
    }
  Tensor z = Normalize({0.2860f}, {0.3530f})(x, rng);  // one value for every channel
  EXPECT_FLOAT_EQ(z.data<float>()[13], (x.data<float>()[13] - 0.2860f) / 0.3530f);
  EXPECT_THROW(Normalize({1, 2, 3}, {1, 1, 1})(x, rng), Error);  // 3 means, 2 channels
  EXPECT_THROW(Normalize({1}, {0})(x, rng), Error);
}

TEST(Transforms, HorizontalFlipFlips) {
  Tensor x = image(2, 3, 5);
  SampleRng rng(0, 0, 0);
  Tensor f = RandomHorizontalFlip(1.0)(x, rng);
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t w = 0; w < 5; ++w) EXPECT_EQ(at(f, c, y, w), at(x, c, y, 4 - w));
  Tensor same = RandomHorizontalFlip(0.0)(x, rng);
  EXPECT_EQ(same.to_vector<float>(), x.to_vector<float>());
  // p = 0.5: about half the samples flip, and each sample's decision is reproducible.
  int flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    SampleRng a(7, 1, i), b(7, 1, i);
    Tensor fa = RandomHorizontalFlip(0.5)(x, a), fb = RandomHorizontalFlip(0.5)(x, b);
    ASSERT_EQ(fa.to_vector<float>(), fb.to_vector<float>());
    flipped += at(fa, 0, 0, 0) != at(x, 0, 0, 0);
  }
  EXPECT_GT(flipped, 420);
  EXPECT_LT(flipped, 580);
}

TEST(Transforms, RandomCropIsAWindowOfTheZeroPaddedImage) {
  const int64_t C = 2, H = 6, W = 7, P = 2, S = 5;
  Tensor x = image(C, H, W);
  // The padded image, built naively here.
  const int64_t PH = H + 2 * P, PW = W + 2 * P;
  std::vector<float> padded = pad_image(x, P, 0.0f);
  RandomCrop crop(S, P);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < 3000; ++i) {
    SampleRng rng(11, 0, i);
    Tensor out = crop(x, rng);
    ASSERT_EQ(out.shape(), (Shape{C, S, S}));
    // Find the window it is (values are distinct, so at most one matches).
    auto found = matching_windows(out, padded, PH, PW);
    ASSERT_EQ(found.size(), 1u) << "sample " << i;
    offsets.insert(found[0]);
    SampleRng again(11, 0, i);
    ASSERT_EQ(crop(x, again).to_vector<float>(), out.to_vector<float>());
  }
  // Every one of the (PH - S + 1) x (PW - S + 1) positions occurs, corners (with zeros) included.
  EXPECT_EQ(int64_t(offsets.size()), (PH - S + 1) * (PW - S + 1));
  EXPECT_TRUE(offsets.count({0, 0}) && offsets.count({PH - S, PW - S}));

  // A crop larger than the padded image.
  SampleRng rng(1, 1, 1);
  EXPECT_THROW(RandomCrop(9, 1)(image(1, 6, 6), rng), Error);
}

// A fill value, a 2-d image and a rectangular (3, 2) crop: every output is exactly one window of
// the image padded with -1, and every window position occurs.
TEST(Transforms, RandomCropWithFillIsAWindowOfTheFilledImage) {
  Tensor x = image(1, 4, 4);
  std::vector<float> padded = pad_image(x, 1, -1.0f);  // (1, 6, 6)
  RandomCrop crop({3, 2}, 1, -1.0f);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t i = 0; i < 400; ++i) {
    SampleRng rng(5, 0, i);
    Tensor y2 = crop(x.view({4, 4}), rng);
    ASSERT_EQ(y2.shape(), (Shape{3, 2}));
    auto found = matching_windows(y2.view({1, 3, 2}), padded, 6, 6);
    ASSERT_EQ(found.size(), 1u) << "sample " << i;
    offsets.insert(found[0]);
  }
  EXPECT_EQ(offsets.size(), size_t((6 - 3 + 1) * (6 - 2 + 1)));

  // Mostly fill: an (8, 8) crop of a (2, 2) image padded by 4 holds the 4 pixels and 60 fills.
  std::vector<float> padded2 = pad_image(image(1, 2, 2), 4, -1.0f);  // (1, 10, 10)
  for (int64_t i = 0; i < 50; ++i) {
    SampleRng rng(6, 0, i);
    Tensor filled = RandomCrop(8, 4, -1.0f)(image(1, 2, 2), rng);
    int fills = 0;
    for (float v : filled.to_vector<float>()) fills += v == -1.0f;
    EXPECT_EQ(fills, 64 - 4);
    ASSERT_EQ(matching_windows(filled, padded2, 10, 10).size(), 1u) << "sample " << i;
  }
}

TEST(Transforms, ComposeRunsInOrderOnOneStream) {
  Tensor x = image(1, 6, 6);
  auto crop = std::make_shared<RandomCrop>(6, 2);
  auto flip = std::make_shared<RandomHorizontalFlip>(0.5);
  auto norm = std::make_shared<Normalize>(std::vector<float>{1.0f}, std::vector<float>{2.0f});
  Compose all({crop, flip, norm});
  EXPECT_EQ(all.name(), "Compose(RandomCrop, RandomHorizontalFlip, Normalize)");
  for (int64_t i = 0; i < 50; ++i) {
    SampleRng a(3, 0, i), b(3, 0, i);
    Tensor want = (*norm)((*flip)((*crop)(x, b), b), b);
    EXPECT_EQ(all(x, a).to_vector<float>(), want.to_vector<float>()) << i;
  }
  EXPECT_THROW(RandomHorizontalFlip(1.5), Error);
  Tensor u8 = from_vector(std::vector<uint8_t>(4, 1), {2, 2});
  SampleRng rng(0, 0, 0);
  EXPECT_THROW((*flip)(u8, rng), Error);
}
