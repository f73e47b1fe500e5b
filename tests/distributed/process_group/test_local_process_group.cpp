// LocalProcessGroup (distributed/process_group/local_process_group.h), the group of a world of one,
// made directly: each collective leaves the tensor as it is or copies in to out, and the public
// checks still run before it. Leaves out: init_process_group choosing it
// (test_gloo_process_group.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "autograd/ops/factory.h"
#include "core/error.h"
#include "distributed/process_group/local_process_group.h"
#include "support/errors.h"

using namespace loom;
using namespace loom::distributed;

using loom::test::error_of;

namespace {

TEST(LocalProcessGroup, IsRankZeroOfOneWithNoStore) {
  LocalProcessGroup pg(std::chrono::seconds(3));
  EXPECT_EQ(pg.rank(), 0);
  EXPECT_EQ(pg.size(), 1);
  EXPECT_EQ(pg.backend(), "local");
  EXPECT_EQ(pg.timeout(), Millis(3000));
  EXPECT_EQ(pg.store(), nullptr);
}

TEST(LocalProcessGroup, EveryReductionAndBroadcastLeavesTheTensor) {
  LocalProcessGroup pg(std::chrono::seconds(3));
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min, ReduceOp::Product}) {
    Tensor t = from_vector<float>({1.5f, -2, 3}, {3});
    auto w = pg.all_reduce(t, op);
    EXPECT_TRUE(w->is_completed()) << reduce_op_name(op);
    EXPECT_TRUE(w->wait());
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2, 3})) << reduce_op_name(op);
  }
  Tensor b = from_vector<int64_t>({7, 8}, {2});
  pg.broadcast(b, 0)->wait();
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{7, 8}));
  EXPECT_TRUE(pg.barrier()->is_completed());
}

TEST(LocalProcessGroup, GatherAndScatterCopyInToOut) {
  LocalProcessGroup pg(std::chrono::seconds(3));
  Tensor in = from_vector<float>({4, 5, 6, 7}, {2, 2});
  Tensor out = zeros({2, 2});
  pg.all_gather(out, in)->wait();
  EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  Tensor out2 = zeros({4});
  pg.reduce_scatter(out2, in, ReduceOp::Max)->wait();
  EXPECT_EQ(out2.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));
  EXPECT_EQ(in.to_vector<float>(), (std::vector<float>{4, 5, 6, 7}));  // in is left alone
  Tensor empty_in = zeros({0}), empty_out = zeros({0});
  pg.all_gather(empty_out, empty_in)->wait();  // 0 elements: nothing to copy
}

TEST(LocalProcessGroup, TheChecksStillRunAndNameTheProblem) {
  LocalProcessGroup pg(std::chrono::seconds(3));
  Tensor t = from_vector<float>({1, 2}, {2});
  EXPECT_NE(error_of([&] { pg.send(t, 1); }).find("send: destination 1 is not another rank"),
            std::string::npos);
  EXPECT_NE(error_of([&] { pg.recv(t, 0); }).find("recv: source 0 is not another rank"),
            std::string::npos);
  Tensor out = zeros({3});
  EXPECT_NE(error_of([&] { pg.all_gather(out, t); }).find("it needs 1 x 2"), std::string::npos);
  Tensor i = from_vector<int64_t>({1}, {1});
  EXPECT_NE(error_of([&] { pg.all_reduce(i, ReduceOp::Avg); }).find("needs a floating-point"),
            std::string::npos);
}

}  // namespace
