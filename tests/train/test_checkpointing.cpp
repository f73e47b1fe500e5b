// The resume checks of train/checkpointing.h against hand-made checkpoint states: each counter out
// of range, a finished run, another dtype, each error naming the file and the values. Leaves out:
// resuming whole runs (tests/examples/test_train_mlp_resume.cpp runs the program).
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "nn/models.h"
#include "train/checkpointing.h"

using namespace loom;
using namespace loom::train;

namespace {

// A run of 2 epochs of 8 steps over 256 examples; the state is after epoch 1.
struct Fixture {
  TrainConfig cfg;
  std::shared_ptr<nn::Module> model = nn::make_mlp(16);
  Fixture() { cfg.epochs = 2; }
  TrainingState state() const {
    TrainingState st;
    st.source = "ckpt/step-8.ckpt";
    st.model = model->state_dict();
    st.set_extra("epoch", 1);
    st.set_extra("position", 0);
    st.set_extra("step", 8);
    return st;
  }
  // The error of check_resume_state after `change`, "" when it passes.
  std::string error(const std::function<void(TrainingState&)>& change) const {
    TrainingState st = state();
    change(st);
    try {
      check_resume_state(st, model->state_dict(), 8, 256, cfg);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

void expect_parts(const std::string& what, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(what.empty()) << "no error";
  for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << p << " in: " << what;
}

}  // namespace

TEST(ResumeChecks, AStateThatFitsPasses) {
  Fixture f;
  EXPECT_EQ(f.error([](TrainingState&) {}), "");
  EXPECT_EQ(f.error([](TrainingState& s) { s.set_extra("position", 256); }), "");  // epoch's end
}

TEST(ResumeChecks, CountersOutOfRangeAreErrorsNamingTheFileAndValues) {
  Fixture f;
  const std::string file = "checkpoint 'ckpt/step-8.ckpt'";
  expect_parts(f.error([](TrainingState& s) { s.set_extra("epoch", 5); }),
               {file, "epoch 5 is beyond this run's --epochs 2"});
  expect_parts(f.error([](TrainingState& s) { s.set_extra("epoch", 2); }),
               {file, "the run is complete (2 of --epochs 2 epochs done)"});
  expect_parts(f.error([](TrainingState& s) { s.set_extra("position", 9999); }),
               {file, "sampler position 9999 is beyond the epoch of 256 examples"});
  expect_parts(f.error([](TrainingState& s) { s.set_extra("step", 999); }),
               {file, "step 999 is beyond what epoch 2 can reach (8 steps per epoch"});
  expect_parts(f.error([](TrainingState& s) { s.set_extra("step", -1); }),
               {file, "negative counters (epoch 1, step -1, position 0)"});
}

TEST(ResumeChecks, MaxStepsAlreadyReachedIsAnError) {
  Fixture f;
  f.cfg.max_steps = 8;
  expect_parts(f.error([](TrainingState&) {}), {"step 8 is not below --max-steps 8"});
  f.cfg.max_steps = 9;
  EXPECT_EQ(f.error([](TrainingState&) {}), "");
}

TEST(ResumeChecks, AModelTensorOfAnotherDtypeIsAnError) {
  Fixture f;
  const std::string first = f.model->state_dict()[0].first;
  expect_parts(f.error([](TrainingState& s) { s.model[0].second = s.model[0].second.to(kF64); }),
               {"model tensor '" + first + "' is float64", "the model's is float32"});
}
