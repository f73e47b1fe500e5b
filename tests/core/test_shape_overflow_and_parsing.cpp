// Inputs a new user can type that used to crash or give garbage: shapes whose element or byte
// count overflows int64, device strings that std::stoi choked on, and the source locations that
// errors print. Leaves out: the errors of ops (tests/autograd/ops/test_ops_errors.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>

#include "autograd/ops/ops.h"
#include "support/errors.h"

using loom::test::expect_error;
using namespace loom;

namespace {

constexpr int64_t kBig = int64_t(1) << 40;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

}  // namespace

TEST(Overflow, FactoriesRefuseShapesWhoseElementCountOverflows) {
  expect_error(
      [] {
        empty({kBig, kBig});
      },
      {"empty", "[1099511627776, 1099511627776]", "overflow"});
  expect_error([] { zeros({kMax, 2}); }, {"zeros", "[9223372036854775807, 2]"});
  expect_error([] { ones({kBig, kBig}); }, {"ones"});
  expect_error([] { full({kBig, kBig}, 1.0); }, {"full"});
  expect_error([] { randn({3, kBig, kBig}); }, {"randn", "[3, 1099511627776, 1099511627776]"});
  expect_error([] { rand({kBig, kBig}); }, {"rand"});
  expect_error([] { randint(0, 3, {kBig, kBig}); }, {"randint"});
  expect_error([] { arange(0, 1e30, 1); }, {"arange"});
  expect_error([] { empty({-1, 3}); }, {"empty", "negative size -1", "[-1, 3]"});
  // A zero anywhere makes an empty tensor, however large the other sizes.
  EXPECT_EQ(empty({0, kMax}).numel(), 0);
  // ... even when the sizes after the zero multiply past int64 (UB before; found by idx_fuzz):
  // the strides that address nothing saturate.
  Tensor z = empty({0, kBig, kBig});
  EXPECT_EQ(z.numel(), 0);
  EXPECT_EQ(z.strides(), (Strides{kMax, kBig, 1}));
}

TEST(Overflow, FactoriesRefuseShapesWhoseByteCountOverflows) {
  // 2^62 doubles: the element count fits int64, 2^65 bytes does not (it used to wrap to 0 bytes:
  // a tensor of 2^62 elements on an empty allocation).
  expect_error([] { empty({int64_t(1) << 62}, {.dtype = kF64}); },
               {"empty", "[4611686018427387904]", "bytes"});
  expect_error([] { zeros({int64_t(1) << 61}, {.dtype = kF32}); }, {"zeros", "bytes"});
}

TEST(Overflow, ViewsRefuseShapesWhoseElementCountOverflows) {
  Tensor x = ones({1, 1});
  expect_error([&] { x.expand({kBig, kBig}); }, {"expand", "[1099511627776, 1099511627776]"});
  Tensor y = ones({4});
  expect_error([&] { y.view({kBig, kBig, 0, -1}); }, {"view"});
  expect_error([&] { y.reshape({kMax, kMax, -1}); }, {"reshape"});
  EXPECT_EQ(y.view({2, -1}).shape(), (Shape{2, 2}));
}

TEST(DeviceParsing, BadIndicesAreErrorsNamingTheString) {
  EXPECT_EQ(Device("cuda:0").index, 0);
  EXPECT_EQ(Device("cuda:1023").index, 1023);
  expect_error([] { Device("cuda:99999999999"); }, {"cuda:99999999999", "out of range"});
  expect_error([] { Device("cuda:1024"); }, {"cuda:1024"});
  expect_error([] { Device("cuda:-1"); }, {"cuda:-1"});
  expect_error([] { Device("cuda:x"); }, {"cuda:x"});
  expect_error([] { Device("cuda:"); }, {"cuda:"});
  expect_error([] { Device("cuda:1 "); }, {"cuda:1 "});
  expect_error([] { Device("cudax"); }, {"cudax"});
  expect_error([] { Device(""); }, {"cannot parse"});
}

TEST(ErrorLocation, IsRelativeToTheRepository) {
  try {
    LOOM_CHECK(false, "test: a failed check");
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("(at tests/core/test_shape_overflow_and_parsing.cpp:"), std::string::npos)
        << what;
    EXPECT_EQ(what.find("/tests/core"), std::string::npos) << what;  // no absolute prefix
  }
  try {
    empty({-2});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(at core/shape.cpp:"), std::string::npos) << e.what();
  }
}
