// The autograd engine: accumulation, retain_graph, no_grad, detach, in-place version errors,
// hooks and end-of-backward callbacks, diamond graphs, deep graphs without recursion.
#include <gtest/gtest.h>

#include <utility>

#include "autograd/function.h"
#include "autograd/ops/ops.h"
#include "core/allocator.h"

using namespace loom;

namespace {
Tensor leaf(std::vector<double> v, Shape s) { return from_vector(v, s, true); }
}  // namespace

TEST(Engine, GradientsOfASmallGraph) {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = (x * x * 3.0 + x).sum();  // dy/dx = 6x + 1
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{7, 13, 19}));
}

TEST(Engine, AccumulatesOverTwoBackwards) {
  Tensor x = leaf({1, 2}, {2});
  (x * 2.0).sum().backward();
  (x * x).sum().backward();  // adds 2x
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 6}));
}

TEST(Engine, DiamondSumsBothPaths) {
  Tensor x = leaf({3}, {1});
  Tensor a = x * 2.0, b = x * x;
  (a * b).sum().backward();  // d/dx 2x^3 = 6x^2
  EXPECT_DOUBLE_EQ(x.grad().item(), 54.0);
}

TEST(Engine, SecondBackwardWithoutRetainGraphIsAnError) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = (x * x).sum();
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = (x * x).sum();
  y.backward(Tensor(), true);
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4, 8}));
}

TEST(Engine, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW(y.sum().backward(), Error);
  EXPECT_TRUE(autograd::is_grad_enabled());
}

TEST(Engine, DetachStopsGradients) {
  Tensor x = leaf({2}, {1});
  Tensor y = x * x.detach();  // d/dx = x (the detached factor is a constant)
  y.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 2.0);
  EXPECT_EQ(x.detach().storage(), x.storage());
}

TEST(Engine, ModifyingASavedTensorInPlaceIsAnError) {
  Tensor x = leaf({1, 2}, {2});
  Tensor a = x * 1.0;  // a non-leaf
  Tensor e = exp(a);   // saves its output
  {
    NoGradGuard g;
    e.mul_(2.0);  // modifies the saved output (allowed under no_grad, bumps the version)
  }
  try {
    e.sum().backward();
    FAIL() << "expected an error";
  } catch (const Error& err) {
    std::string m = err.what();
    EXPECT_NE(m.find("exp"), std::string::npos) << m;
    EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
  }
}

TEST(Engine, InPlaceOnALeafThatRequiresGradIsAnError) {
  Tensor x = leaf({1, 2}, {2});
  try {
    x.add_(ones({2}, {.dtype = kF64}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add_"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NoGradGuard"), std::string::npos) << e.what();
  }
  NoGradGuard g;
  x.add_(ones({2}, {.dtype = kF64}));
  EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{2, 3}));
  EXPECT_EQ(x.version(), 1u);
}

TEST(Engine, PostAccumulateHooksAndCallbacksRunInOrder) {
  Tensor w1 = leaf({1}, {1}), w2 = leaf({2}, {1});
  std::vector<std::string> events;
  autograd::register_post_accumulate_grad_hook(w1, [&](const Tensor& p) {
    events.push_back("w1 grad " + std::to_string(p.grad().item()));
    autograd::queue_callback([&] { events.push_back("callback"); });
  });
  autograd::register_post_accumulate_grad_hook(w2, [&](const Tensor&) { events.push_back("w2"); });
  Tensor h = w1 * 3.0;  // created first: its gradient arrives last
  Tensor y = h * w2;    // y = 3 w1 w2
  y.sum().backward();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], "w2");  // reverse order of the forward
  EXPECT_EQ(events[1], "w1 grad 6.000000");
  EXPECT_EQ(events[2], "callback");                      // after the whole pass
  EXPECT_THROW(autograd::queue_callback([] {}), Error);  // no pass running now
}

TEST(Engine, DeepChainDoesNotRecurse) {
  Tensor x = leaf({1.0}, {1});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  y.sum().backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 1.0);
}

TEST(Engine, UnusedBranchGetsNoGradient) {
  Tensor x = leaf({1, 2}, {2}), z = leaf({5}, {1});
  Tensor unused = z * 2.0;  // recorded but not part of the loss
  (x * 2.0).sum().backward();
  EXPECT_FALSE(z.grad().defined());
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Engine, GradientOfAViewFlowsToTheBase) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x.t().slice(0, 1, 3).reshape({4});  // columns 1 and 2 of x
  (y * from_vector<double>({1, 2, 3, 4}, {4})).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 3, 0, 2, 4}));
}

// Bytes the CPU allocator hands out while f runs (core/allocator.h's instrumentation counter).
template <typename F>
uint64_t bytes_allocated_by(const F& f) {
  uint64_t before = cpu_alloc_stats().bytes;
  f();
  return cpu_alloc_stats().bytes - before;
}

// mm's and bmm's backward compute an input's product only when needs_input_grad says it is
// needed. The unneeded product has that input's shape (256 KiB here) while everything else the
// backward allocates is a few KiB, so the bytes allocated show whether it was computed. The
// same backward with both inputs requiring grad must allocate it (the counter sees it).
TEST(Engine, NeedsInputGradSkipsUnneededProducts) {
  using MatFn = Tensor (*)(const Tensor&, const Tensor&);
  struct Case {
    const char* name;
    MatFn fn;
    Shape big, small;
  };
  for (const Case& c :
       {Case{"mm", &mm, {512, 64}, {64, 2}}, Case{"bmm", &bmm, {2, 256, 64}, {2, 64, 2}}}) {
    const uint64_t big_bytes = uint64_t(numel(c.big)) * 8;  // f64
    for (bool big_first : {true, false}) {
      // big_first: data (big, no grad) @ weight (small, grad); else the transposed problem,
      // weight (small^T, grad) @ data (big^T, no grad).
      Shape big = c.big, small = c.small;
      if (!big_first) {
        std::swap(big[big.size() - 1], big[big.size() - 2]);
        std::swap(small[small.size() - 1], small[small.size() - 2]);
      }
      Tensor data = randn(big, {.dtype = kF64});
      Tensor weight = randn(small, {.dtype = kF64, .requires_grad = true});
      Tensor loss = (big_first ? c.fn(data, weight) : c.fn(weight, data)).sum();
      uint64_t bytes = bytes_allocated_by([&] { loss.backward(); });
      EXPECT_LT(bytes, big_bytes) << c.name << (big_first ? " (data @ w)" : " (w @ data)")
                                  << ": backward allocated the unneeded product";
      EXPECT_FALSE(data.grad().defined());
      ASSERT_TRUE(weight.grad().defined());
      // Its value: the ones-gradient against data, i.e. sums of data's rows or columns.
      Tensor ones_like_out = ones(
          big_first ? c.fn(data, weight).shape() : c.fn(weight, data).shape(), {.dtype = kF64});
      Tensor want = big_first ? c.fn(data.transpose(-1, -2), ones_like_out)
                              : c.fn(ones_like_out, data.transpose(-1, -2));
      auto g = weight.grad().to_vector<double>(), wv = want.to_vector<double>();
      ASSERT_EQ(g.size(), wv.size());
      for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], wv[i], 1e-9) << c.name << " " << i;

      // Control: with grad on both, the big product is computed and the counter sees it.
      Tensor data2 = data.clone().requires_grad_(true),
             weight2 = weight.detach().requires_grad_(true);
      Tensor loss2 = (big_first ? c.fn(data2, weight2) : c.fn(weight2, data2)).sum();
      EXPECT_GE(bytes_allocated_by([&] { loss2.backward(); }), big_bytes) << c.name;
      EXPECT_TRUE(data2.grad().defined());
    }
  }
}

TEST(Engine, GradOfNonScalarNeedsAnExplicitGradient) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), Error);
  y.backward(from_vector<double>({1, 10}, {2}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 20}));
}

TEST(Engine, ToDtypeIsDifferentiable) {
  Tensor x = leaf({1.5, -2}, {2});
  Tensor y = (x.to(kF32) * 2.0).sum();
  y.backward();
  EXPECT_EQ(x.grad().dtype(), kF64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

// Note [Taking the pending gradient]: r = 2x is read by a custom op recorded first (so it runs
// last in backward) and by 3r recorded after it. The custom op takes the pending sum (3, from
// 3r) and adds it itself: x's gradient is the same as when the engine adds, and the sum was
// there to take. A backward that takes it and returns nothing gets it put back; a dtype that does
// not match takes nothing.
TEST(Engine, ABackwardMayTakeThePendingSumOfItsInputsGradient) {
  enum class Mode { AddIt, DropIt, WrongDtype };
  for (Mode mode : {Mode::AddIt, Mode::DropIt, Mode::WrongDtype}) {
    Tensor x = leaf({1, 2}, {2});
    Tensor r = x * 2.0;
    bool took = false;
    Tensor out =
        autograd::record("take", r.detach() * 1.0, {r}, [&took, mode](const Tensor& g) -> Grads {
          Tensor p = autograd::take_pending_grad(0, mode == Mode::WrongDtype ? kF32 : kF64);
          took = p.defined();
          if (mode == Mode::DropIt) return {Tensor()};
          return {p.defined() ? g * 5.0 + p : g * 5.0};  // d out/dr = 5 (a stand-in)
        });
    Tensor v = r * 3.0;
    (out.sum() + v.sum()).backward();
    const double per_r = mode == Mode::DropIt ? 3.0 : 5.0 + 3.0;
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2 * per_r, 2 * per_r}))
        << int(mode);
    EXPECT_EQ(took, mode != Mode::WrongDtype) << int(mode);
  }
  // Outside a backward there is nothing to take.
  EXPECT_FALSE(autograd::take_pending_grad(0, kF64).defined());
}
