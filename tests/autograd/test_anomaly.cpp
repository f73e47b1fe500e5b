// Anomaly mode (autograd/anomaly.h): a NaN made in forward (log of a negative number) and an Inf
// made only in backward (sqrt at 0) are each an error naming the op, the pass and the module path
// where the forward was recorded; with the mode off both run through silently.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/anomaly.h"
#include "autograd/ops/ops.h"
#include "nn/layers.h"
#include "support/errors.h"

using loom::test::error_of;
using namespace loom;

namespace {

// log(x): NaN for negative inputs.
struct LogLayer : nn::Module {
  LogLayer() : Module("LogLayer") {}
  Tensor forward(const Tensor& x) override { return log(x); }
};

// sqrt(x): finite at 0 in forward, but its gradient 0.5 / sqrt(x) is Inf there.
struct SqrtLayer : nn::Module {
  SqrtLayer() : Module("SqrtLayer") {}
  Tensor forward(const Tensor& x) override { return sqrt(x); }
};

// Linear(3 -> 2) with every weight `w` and bias `b`, then `tail`.
std::shared_ptr<nn::Sequential> net(double w, double b, std::shared_ptr<nn::Module> tail) {
  auto fc = std::make_shared<nn::Linear>(3, 2);
  {
    NoGradGuard g;
    fc->weight.fill_(w);
    fc->bias.fill_(b);
  }
  return std::make_shared<nn::Sequential>(fc, std::move(tail));
}

Tensor input() { return from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}); }

}  // namespace

TEST(Anomaly, OffByDefault) { EXPECT_FALSE(autograd::is_anomaly_enabled()); }

TEST(Anomaly, NanInForwardNamesTheOpAndTheModule) {
  auto m = net(-1.0, -1.0, std::make_shared<LogLayer>());  // the Linear gives -7 and -16
  {                                                        // off: the NaN flows through silently
    Tensor y = (*m)(input()).sum();
    EXPECT_TRUE(std::isnan(y.item()));
  }
  DetectAnomalyGuard on;
  std::string msg = error_of([&] { (*m)(input()).sum(); });
  EXPECT_NE(msg.find("detect_anomaly: the forward of 'log'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recorded in Sequential > 1 (LogLayer)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 NaN and 0 Inf among its 4 values"), std::string::npos) << msg;
  EXPECT_NE(msg.find("from finite inputs"), std::string::npos) << msg;
}

TEST(Anomaly, InfOnlyInBackwardNamesTheOpWhoseForwardWasRecorded) {
  auto m = net(0.0, 0.0, std::make_shared<SqrtLayer>());  // the Linear gives 0: sqrt(0) = 0
  {                                                       // off: the Inf reaches the weights
    Tensor y = (*m)(input()).sum();
    EXPECT_EQ(y.item(), 0.0);
    y.backward();
    auto fc = m->at<nn::Linear>(0);
    EXPECT_TRUE(std::isinf(fc->bias.grad().to_vector<float>()[0]));
    fc->zero_grad();
  }
  DetectAnomalyGuard on;
  Tensor y = (*m)(input()).sum();  // the forward is clean
  EXPECT_EQ(y.item(), 0.0);
  std::string msg = error_of([&] { y.backward(); });
  EXPECT_NE(msg.find("detect_anomaly: the backward of 'sqrt'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recorded in Sequential > 1 (SqrtLayer)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0 NaN and 4 Inf in the gradient for its input 0"), std::string::npos) << msg;
}

TEST(Anomaly, NanFromOutsideTheGraphIsBlamedOnTheInput) {
  auto m = net(1.0, 0.0, std::make_shared<LogLayer>());
  DetectAnomalyGuard on;
  Tensor x = input();
  x.fill_(std::nan(""));  // the data itself: no op of the graph made it
  std::string msg = error_of([&] { (*m)(x); });
  EXPECT_NE(msg.find("already held 6 NaN and 0 Inf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("recorded in Sequential > 0 (Linear)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("made outside the autograd graph"), std::string::npos) << msg;
}

TEST(Anomaly, GuardRestoresTheSettingAndScopesArePoppedOnErrors) {
  {
    DetectAnomalyGuard on;
    EXPECT_TRUE(autograd::is_anomaly_enabled());
    auto m = net(-1.0, -1.0, std::make_shared<LogLayer>());
    EXPECT_NE(error_of([&] { (*m)(input()); }), "");
    EXPECT_EQ(autograd::anomaly_scope_path(), "");  // the throw unwound every scope
    autograd::AnomalyScope a("outer");
    autograd::AnomalyScope b("inner");
    EXPECT_EQ(autograd::anomaly_scope_path(), "outer > inner");
  }
  EXPECT_FALSE(autograd::is_anomaly_enabled());
  autograd::AnomalyScope off("ignored when off");
  EXPECT_EQ(autograd::anomaly_scope_path(), "");
}
