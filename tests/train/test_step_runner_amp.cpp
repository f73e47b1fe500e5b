// Mixed-precision training steps through train::StepRunner on the CPU: a small MLP trained with
// bf16 autocast, and with fp16 autocast plus a GradScaler, ends close to the float32 run's loss,
// with float32 parameters and optimizer state throughout.
#include <gtest/gtest.h>

#include <cmath>

#include "autograd/ops/ops.h"
#include "nn/amp/grad_scaler.h"
#include "nn/models.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"

using namespace loom;

namespace {

struct AmpRun {
  double first_loss = 0, last_loss = 0;
  bool params_f32 = true;
  int64_t skipped = 0;
};

// 80 full-batch Adam steps on labels that a linear teacher assigns to random inputs.
AmpRun train_mlp(std::optional<DType> amp_dtype) {
  manual_seed(5);
  Tensor x = randn({128, 784});
  Tensor teacher = randn({784, 4});
  Tensor y = argmax(mm(x, teacher), 1);
  auto model = nn::make_mlp(32, 4);
  optim::Adam opt(model->parameters(), {.lr = 3e-3});
  train::StepRunner runner(*model, opt, 0.0, false);
  amp::GradScaler scaler({.enabled = amp_dtype == kF16});
  runner.set_amp(amp_dtype, scaler.is_enabled() ? &scaler : nullptr);
  AmpRun r;
  for (int i = 0; i < 80; ++i) {
    double loss = runner.step(x, y).item();
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
  }
  for (const Tensor& p : model->parameters()) r.params_f32 = r.params_f32 && p.dtype() == kF32;
  for (size_t i = 0; i < opt.all_params().size(); ++i)
    for (const Tensor& b : opt.state(i).buffers) r.params_f32 = r.params_f32 && b.dtype() == kF32;
  r.skipped = scaler.skipped_steps();
  return r;
}

}  // namespace

TEST(AmpStep, Bf16AndFp16TrainingReachTheFloat32Loss) {
  AmpRun ref = train_mlp(std::nullopt);
  ASSERT_LT(ref.last_loss, 0.5 * ref.first_loss) << "the float32 run itself must learn";
  for (DType low : {kBF16, kF16}) {
    SCOPED_TRACE(dtype_name(low));
    AmpRun r = train_mlp(low);
    EXPECT_NEAR(r.first_loss, ref.first_loss, 0.02);
    EXPECT_NEAR(r.last_loss, ref.last_loss, 0.05 + 0.1 * ref.last_loss);
    EXPECT_TRUE(r.params_f32) << "parameters and optimizer state stay float32";
    EXPECT_EQ(r.skipped, 0);
  }
}
