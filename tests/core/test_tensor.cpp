// core/: dtypes, shapes, views sharing storage, half conversions, Philox.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "core/philox.h"
#include "core/tensor_views.h"

using namespace loom;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(kF32), 4u);
  EXPECT_EQ(dtype_size(kBF16), 2u);
  EXPECT_EQ(dtype_size(kI64), 8u);
  EXPECT_STREQ(dtype_name(kF16), "float16");
  EXPECT_EQ(dtype_from_name("bfloat16"), kBF16);
  EXPECT_THROW(dtype_from_name("float7"), Error);
}

TEST(Half, RoundTripAndRounding) {
  // Exactly representable values survive; others round to nearest even.
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f})
    EXPECT_EQ(float(Half(f)), f) << f;
  EXPECT_EQ(float(Half(1.0f + 1.0f / 4096)), 1.0f);                // below half an ulp (2^-11)
  EXPECT_EQ(float(Half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie rounds to even
  EXPECT_TRUE(std::isinf(float(Half(70000.0f))));
  EXPECT_TRUE(std::isnan(float(Half(NAN))));
  EXPECT_EQ(float(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(float(BFloat16(1.0f + 1.0f / 256)), 1.0f);  // 2^-8 is half an ulp: ties to even
  EXPECT_EQ(float(BFloat16(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(float(BFloat16(NAN))));
}

TEST(Device, Parse) {
  EXPECT_EQ(Device("cpu"), kCPU);
  EXPECT_EQ(Device("cuda:3").index, 3);
  EXPECT_TRUE(Device("cuda").is_cuda());
  EXPECT_THROW(Device("tpu"), Error);
  EXPECT_THROW(Device("cuda:x"), Error);
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes("t", {3, 1, 5}, {4, 5}), (Shape{3, 4, 5}));
  EXPECT_EQ(broadcast_shapes("t", {}, {2}), (Shape{2}));
  EXPECT_THROW(broadcast_shapes("t", {3}, {4}), Error);
}

TEST(Views, ShareStorageAndSeeWrites) {
  Tensor x = arange(0, 12, 1, {.dtype = kF32}).view({3, 4});
  Tensor t = x.t();
  EXPECT_EQ(t.shape(), (Shape{4, 3}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.storage(), x.storage());
  Tensor row = x.select(0, 1);
  {
    NoGradGuard g;
    row.fill_(7.0);
  }
  EXPECT_EQ(x.to_vector<float>()[4], 7.0f);
  EXPECT_EQ(t.contiguous().to_vector<float>(),
            (std::vector<float>{0, 7, 8, 1, 7, 9, 2, 7, 10, 3, 7, 11}));
  Tensor s = x.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.contiguous().to_vector<float>(), (std::vector<float>{1, 3, 7, 7, 9, 11}));
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(x.unsqueeze(0).squeeze(0).shape(), (Shape{3, 4}));
  EXPECT_EQ(x.view({-1}).shape(), (Shape{12}));
  EXPECT_EQ(x.expand({2, 3, 4}).strides(), (Strides{0, 4, 1}));
  EXPECT_EQ(x.permute({1, 0}).strides(), (Strides{1, 4}));
}

TEST(Views, ViewOfTransposedNeedsReshape) {
  Tensor x = arange(0, 6, 1, {.dtype = kF32}).view({2, 3});
  EXPECT_THROW(x.t().view({6}), Error);
  EXPECT_EQ(x.t().reshape({6}).to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  // Merging dims that stay contiguous is still a view.
  Tensor y = arange(0, 24, 1, {.dtype = kF32}).view({2, 3, 4}).slice(0, 1, 2);
  EXPECT_EQ(y.view({12}).storage(), y.storage());
}

TEST(Views, ChannelsLastIsTheProducersChoice) {
  // (N, 1, H, W) with the usual strides has channels-last memory but is not channels-last.
  Tensor one = arange(0, 24).reshape({2, 1, 3, 4});
  EXPECT_FALSE(raw::is_channels_last(one));
  Tensor v = to_channels_last(one);  // a view: same storage, NHWC strides
  EXPECT_TRUE(raw::is_channels_last(v));
  EXPECT_EQ(v.data_ptr(), one.data_ptr());
  EXPECT_EQ(v.strides(), (Strides{12, 1, 4, 1}));
  // Several channels: a copy with the strides of (N, H, W, C), the same values.
  Tensor x = arange(0, 120).reshape({2, 3, 4, 5});
  Tensor c = to_channels_last(x);
  EXPECT_TRUE(raw::is_channels_last(c));
  EXPECT_EQ(c.strides(), (Strides{60, 1, 15, 3}));
  EXPECT_EQ(c.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(to_channels_last(c).data_ptr(), c.data_ptr());  // already: itself
  EXPECT_FALSE(raw::is_channels_last(x.permute({0, 1, 3, 2})));
  EXPECT_THROW(to_channels_last(arange(0, 6).reshape({2, 3})), Error);
}

// Note [Elementwise output layout]: results follow their first full-size operand's layout.
TEST(ChannelsLast, ElementwiseResultsKeepTheLayoutAndTheValues) {
  Tensor y = to(arange(0, 120).reshape({2, 3, 4, 5}), DType::F32), x = y - 60.0;
  Tensor xc = to_channels_last(x), yc = to_channels_last(y);
  Tensor sum_cl = xc + yc, relu_cl = relu(xc), scaled = xc * 2.0;
  Tensor bias = to(arange(0, 3).reshape({1, 3, 1, 1}), DType::F32);
  Tensor biased = xc + bias, compared = gt(xc, yc);
  for (const Tensor* t : {&sum_cl, &relu_cl, &scaled, &biased, &compared})
    EXPECT_TRUE(raw::is_channels_last(*t)) << describe(*t);
  EXPECT_EQ(sum_cl.to_vector<float>(), (x + y).to_vector<float>());
  EXPECT_EQ(relu_cl.to_vector<float>(), relu(x).to_vector<float>());
  EXPECT_EQ(scaled.to_vector<float>(), (x * 2.0).to_vector<float>());
  EXPECT_EQ(biased.to_vector<float>(), (x + bias).to_vector<float>());
  EXPECT_EQ(compared.to_vector<float>(), gt(x, y).to_vector<float>());
  // The first full-size operand decides: contiguous first -> contiguous, broadcast first -> the
  // channels-last operand behind it.
  Tensor mixed = x + yc;
  EXPECT_TRUE(mixed.is_contiguous());
  EXPECT_EQ(mixed.to_vector<float>(), (x + y).to_vector<float>());
  EXPECT_TRUE(raw::is_channels_last(bias + xc));
  // Its gradient flows back in the same layout and value as the contiguous one's.
  Tensor a = xc.detach().requires_grad_(true);
  sum(relu(a + yc) * 3.0).backward();
  Tensor b = x.detach().requires_grad_(true);
  sum(relu(b + y) * 3.0).backward();
  EXPECT_EQ(a.grad().to_vector<float>(), b.grad().to_vector<float>());
}

TEST(Philox, KnownAnswer) {
  // Random123's known-answer vector for philox4x32-10 with zero key and counter.
  Philox4 r = philox4x32(0, 0, 0);
  EXPECT_EQ(r.v[0], 0x6627e8d5u);
  EXPECT_EQ(r.v[1], 0xe169c58du);
  EXPECT_EQ(r.v[2], 0xbc57ac4cu);
  EXPECT_EQ(r.v[3], 0x9b00dbd8u);
}

TEST(Random, ReproducibleAndPlausible) {
  manual_seed(42);
  Tensor a = randn({10000});
  manual_seed(42);
  Tensor b = randn({10000});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  double m = a.mean().item(), v = var(a).item();
  EXPECT_NEAR(m, 0.0, 0.05);
  EXPECT_NEAR(v, 1.0, 0.05);
  Tensor u = rand({10000});
  EXPECT_GE(min(u).item(), 0.0);
  EXPECT_LT(max(u).item(), 1.0);
  EXPECT_NEAR(u.mean().item(), 0.5, 0.02);
  Tensor r = randint(3, 7, {1000});
  EXPECT_GE(min(r).item(), 3.0);
  EXPECT_LE(max(r).item(), 6.0);
}

TEST(Print, Readable) {
  std::ostringstream os;
  os << arange(0, 4, 1).view({2, 2});
  EXPECT_EQ(os.str(), "tensor([[0, 1],\n        [2, 3]], int64 [2, 2] on cpu)");
}
