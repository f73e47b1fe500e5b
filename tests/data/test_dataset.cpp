// data/dataset: TensorDataset rows and batch gather, collate, and their errors.
#include <gtest/gtest.h>

#include <functional>

#include "autograd/ops/factory.h"
#include "data/dataset.h"
#include "support/errors.h"

using loom::test::error_of;
using namespace loom;
using namespace loom::data;

namespace {}  // namespace

TEST(TensorDataset, RowsAreViewsAndBatchesAreGathered) {
  Tensor x = arange(0, 24, 1, {.dtype = kF32}).view({6, 2, 2});
  Tensor y = arange(100, 106);
  TensorDataset ds(x, y);
  EXPECT_EQ(ds.size(), 6);
  Example e = ds.get(4);
  EXPECT_EQ(e.data.shape(), (Shape{2, 2}));
  EXPECT_EQ(e.data.to_vector<float>(), (std::vector<float>{16, 17, 18, 19}));
  EXPECT_EQ(e.target.item<int64_t>(), 104);
  EXPECT_EQ(e.data.storage(), x.storage());  // a view, no copy

  std::vector<int64_t> idx = {5, 0, 5, 2};
  Example b = ds.get_batch(idx);
  EXPECT_EQ(b.data.shape(), (Shape{4, 2, 2}));
  EXPECT_EQ(b.data.to_vector<float>(),
            (std::vector<float>{20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23, 8, 9, 10, 11}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{105, 100, 105, 102}));

  // A non-contiguous input is made contiguous once; rows still come out right.
  TensorDataset t(x.transpose(1, 2), y);
  EXPECT_EQ(t.get_batch(std::vector<int64_t>{1}).data.to_vector<float>(),
            (std::vector<float>{4, 6, 5, 7}));

  std::string msg = error_of([&] { ds.get_batch(std::vector<int64_t>{1, 6}); });
  EXPECT_NE(msg.find("index 6 is out of range for 6 examples"), std::string::npos) << msg;
  msg = error_of([&] { ds.get(-1); });
  EXPECT_NE(msg.find("index -1"), std::string::npos) << msg;
  msg = error_of([&] { TensorDataset bad(x, arange(5)); });
  EXPECT_NE(msg.find("same first dim"), std::string::npos) << msg;
  TensorDataset unlabeled(x);
  EXPECT_FALSE(unlabeled.get(0).target.defined());
  EXPECT_FALSE(unlabeled.get_batch(std::vector<int64_t>{0, 1}).target.defined());
}

TEST(Collate, StacksAndNamesTheOddExampleOut) {
  std::vector<Example> ex;
  for (int i = 0; i < 3; ++i)
    ex.push_back({full({2, 3}, double(i)), scalar_tensor(double(i), {.dtype = kI64})});
  Example b = collate(ex);
  EXPECT_EQ(b.data.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(b.target.shape(), (Shape{3}));
  EXPECT_EQ(b.data.to_vector<float>()[6], 1.0f);
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  // A strided example is read through its strides.
  ex[1].data = arange(0, 6, 1, {.dtype = kF32}).view({3, 2}).t();
  EXPECT_EQ(collate(ex).data.to_vector<float>()[6 + 1], 2.0f);  // row 0 of the transpose: 0, 2, 4

  ex[2].data = full({3, 2}, 0.0);
  std::string msg = error_of([&] { collate(ex); });
  EXPECT_NE(msg.find("example 2"), std::string::npos) << msg;
  ex[2].data = full({2, 3}, 0.0, {.dtype = kF64});
  msg = error_of([&] { collate(ex); });
  EXPECT_NE(msg.find("float64"), std::string::npos) << msg;
  ex[2].data = full({2, 3}, 0.0);
  ex[2].target = Tensor();
  msg = error_of([&] { collate(ex); });
  EXPECT_NE(msg.find("example 2 has no target"), std::string::npos) << msg;
}
