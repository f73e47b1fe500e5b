// train_cnn (examples/train_cnn.cpp) with the image models people use, as a program on the CPU:
// --model vit on 2 Gloo processes under loomrun ends with one process's weights for the same
// global batch, and --model resnet18 with --sync-bn has one process's gradients (without it,
// BatchNorm normalises each rank's half batch by its own statistics); the cosine
// schedule is saved in checkpoints and a resumed run ends where the straight run ends, bit for
// bit; --recompute-activations under --zero 3 ends with the plain run's weights. Tiny runs
// (--train-limit, --max-steps) so that no evaluation runs; each bounded by
// `timeout`. Leaves out: accuracy (README: the Fashion-MNIST runs on one H200) and CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "example_program.h"
#include "nn/checkpoint.h"
#include "support/fashion_mnist.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

using testing_support::fresh_temp_dir;
using testing_support::run_command;

// The data folder comes from testing_support::fashion_mnist_dir (the tests skip without one).
std::string train_cnn(int procs, const std::string& args, const fs::path& dir) {
  std::string prog = std::string(TRAIN_CNN_BIN) + " --data-dir " +
                     testing_support::fashion_mnist_dir() +
                     " --device cpu --workers 0 --seed 5 --epochs 1 --train-limit 256 " + args +
                     " --checkpoint-dir " + dir.string();
  if (procs == 1) return prog;
  return std::string(LOOMRUN_BIN) + " --standalone --nproc_per_node=" + std::to_string(procs) +
         " " + prog;
}

// The largest |a - b| over the model tensors of two checkpoints, and over a and `start`.
struct Distance {
  double apart = 0, moved = 0;
};

Distance distance(const fs::path& a, const fs::path& b, const fs::path& start) {
  auto sa = load_checkpoint(a.string()), sb = load_checkpoint(b.string());
  auto s0 = load_checkpoint(start.string());
  Distance d;
  EXPECT_EQ(sa.model.size(), sb.model.size());
  for (size_t i = 0; i < sa.model.size() && i < sb.model.size(); ++i) {
    EXPECT_EQ(sa.model[i].first, sb.model[i].first);
    if (sa.model[i].first.find("running_") != std::string::npos) continue;  // BatchNorm buffers
    if (sa.model[i].first.find("num_batches") != std::string::npos) continue;
    d.apart = std::max(d.apart, max(abs(sa.model[i].second - sb.model[i].second)).item());
    d.moved = std::max(d.moved, max(abs(sa.model[i].second - s0.model[i].second)).item());
  }
  return d;
}

std::string ckpt(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%08ld.safetensors", long(step));
  return name;
}

// Two runs of train_cnn with the same `args` (checkpoints every step): run A on procs_a processes
// with extra_a, run B likewise; `d` compares their step-`step` checkpoints (and A's with its step
// 1). Outputs kept for the caller's checks; folders removed with it.
struct TwoRuns {
  fs::path a, b;
  testing_support::CommandRun out_a, out_b;
  Distance d;
  ~TwoRuns() {
    fs::remove_all(a);
    fs::remove_all(b);
  }
};

void run_twice(TwoRuns& r, const std::string& args, int procs_a, const std::string& extra_a,
               int procs_b, const std::string& extra_b, int64_t step) {
  r.a = fresh_temp_dir("cnn_a");
  r.b = fresh_temp_dir("cnn_b");
  const std::string common =
      args + " --max-steps " + std::to_string(step) + " --checkpoint-every 1 --keep-last 10 ";
  r.out_a = run_command(train_cnn(procs_a, common + extra_a, r.a));
  ASSERT_EQ(r.out_a.exit_code, 0) << r.out_a.output;
  r.out_b = run_command(train_cnn(procs_b, common + extra_b, r.b));
  ASSERT_EQ(r.out_b.exit_code, 0) << r.out_b.output;
  r.d = distance(r.a / ckpt(step), r.b / ckpt(step), r.a / ckpt(1));
  EXPECT_GT(r.d.moved, 1e-3) << "steps after the first must move the weights for the comparison "
                                "to mean much";
}

}  // namespace

#ifdef LOOM_WITH_GLOO
TEST(TrainCnnModels, VitOnTwoProcessesEndsWithOneProcesssWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  TwoRuns r;
  ASSERT_NO_FATAL_FAILURE(run_twice(r,
                                    "--model vit --batch-size 16 --optimizer adamw --lr 2e-3 "
                                    "--weight-decay 0.05 --lr-schedule cosine --warmup 1",
                                    1, "", 2, "", 4));
  EXPECT_NE(r.out_a.output.find("training VisionTransformer"), std::string::npos) << r.out_a.output;
  // Rounding only (1e-6 to 2e-5 here, depending on the compiler's summation order; Adam's
  // normalised steps amplify it), against steps of about 2e-3.
  EXPECT_LE(r.d.apart, 1e-4) << "2 processes vs 1, the same global batches";
}

const char* const kResNet18 = "--model resnet18 --batch-size 16 --optimizer adamw --lr 2e-3";

// --zero 3 (FullyShardedDataParallel: each BasicBlock, and the stem's convolution, a unit; the
// BatchNorm buffers each rank's own, rank 0's saved) on 2 processes ends with DDP's weights and
// DDP's rank-0 running statistics.
TEST(TrainCnnModels, ResNet18UnderZeroThreeEndsWithDdpsWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  TwoRuns r;
  ASSERT_NO_FATAL_FAILURE(run_twice(r, kResNet18, 2, "", 2, "--zero 3", 2));
  EXPECT_LE(r.d.apart, 1e-4) << "ZeRO-3 vs DDP on the same 2 processes";
  auto sa = load_checkpoint((r.a / ckpt(2)).string()),
       sb = load_checkpoint((r.b / ckpt(2)).string());
  for (size_t i = 0; i < sa.model.size() && i < sb.model.size(); ++i)
    if (sa.model[i].first.find("running_") != std::string::npos) {
      EXPECT_LE(max(abs(sa.model[i].second - sb.model[i].second)).item(), 1e-5)
          << sa.model[i].first;
    }
}

// --recompute-activations (Note [Recomputed activations]: each batch norm + ReLU output rebuilt in
// backward for the convolution after it), here also under --zero 3 (the BatchNorm parameters the
// recipe reads are gathered again for their unit's backward), ends with the plain run's weights.
TEST(TrainCnnModels, ResNet18WithRecomputedActivationsUnderZeroThreeEndsWithThePlainWeights) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  TwoRuns r;
  ASSERT_NO_FATAL_FAILURE(run_twice(r, kResNet18, 1, "", 1, "--zero 3 --recompute-activations", 2));
  EXPECT_LE(r.d.apart, 1e-5) << "recomputed activations under ZeRO-3 vs the plain run";
}

namespace {

// The first step's gradients (SGD's momentum buffers after one step) of two checkpoints: the
// largest relative distance ||a - b|| / ||a|| of a tensor, over every tensor.
double gradients_apart(const fs::path& a, const fs::path& b) {
  auto sa = load_checkpoint(a.string()), sb = load_checkpoint(b.string());
  double worst = 0;
  EXPECT_EQ(sa.optimizer.size(), sb.optimizer.size());
  for (size_t i = 0; i < sa.optimizer.size() && i < sb.optimizer.size(); ++i) {
    const Tensor &x = sa.optimizer[i].second, &y = sb.optimizer[i].second;
    if (sa.optimizer[i].first.find("momentum") == std::string::npos) continue;
    const double norm = std::sqrt(sum(x * x).item());
    worst = std::max(worst, std::sqrt(sum((x - y) * (x - y)).item()) / std::max(1e-12, norm));
  }
  return worst;
}

}  // namespace

TEST(TrainCnnModels, ResNet18WithSyncBatchNormOnTwoProcessesHasOneProcesssGradients) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path one = fresh_temp_dir("cnn_rn1"), two = fresh_temp_dir("cnn_rn2"),
           plain = fresh_temp_dir("cnn_rn2p");
  // One step: ResNet-18 at initialisation amplifies rounding over steps (the weights of 1 and 2
  // processes part by about 1e-3 after three), so the gradients of the first step are compared.
  const std::string args =
      "--model resnet18 --batch-size 16 --optimizer sgd --lr 0.02 --max-steps 1 "
      "--checkpoint-every 1";
  auto a = run_command(train_cnn(1, args + " --sync-bn true", one));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("training ResNet"), std::string::npos) << a.output;
  EXPECT_EQ(a.output.find("SyncBatchNorm"), std::string::npos) << "one process: nothing to sync";
  auto b = run_command(train_cnn(2, args + " --sync-bn true", two));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("SyncBatchNorm: BatchNorm statistics over the 2 processes"),
            std::string::npos)
      << b.output;
  const double synced = gradients_apart(one / ckpt(1), two / ckpt(1));
  // Rounding only: 3e-7 with GCC's optimised build; BatchNorm's float32 sums in another order
  // (a build without vectorisation) move it by up to 1e-3.
  EXPECT_LE(synced, 1e-3) << "2 processes with SyncBatchNorm vs 1, the same global batch";
  auto s1 = load_checkpoint((one / ckpt(1)).string()),
       s2 = load_checkpoint((two / ckpt(1)).string());
  for (size_t i = 0; i < s1.model.size(); ++i)  // the running stats too: the whole batch's
    EXPECT_LE(max(abs(s1.model[i].second - s2.model[i].second)).item(), 1e-4) << s1.model[i].first;
  // Without it each rank normalises its 8 images alone: the gradients part (what --sync-bn is
  // for), so the comparison above can tell.
  auto c = run_command(train_cnn(2, args, plain));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_GT(gradients_apart(one / ckpt(1), plain / ckpt(1)), 0.1);
  for (const auto& p : {one, two, plain}) fs::remove_all(p);
}
#endif

TEST(TrainCnnModels, CosineScheduleResumesWhereTheStraightRunGoes) {
  LOOM_FASHION_MNIST_OR_SKIP(data_dir);
  fs::path straight = fresh_temp_dir("cnn_cos_s"), split = fresh_temp_dir("cnn_cos_r");
  const std::string args =
      "--model vit --batch-size 16 --optimizer adamw --lr 2e-3 --lr-schedule cosine --warmup 2 "
      "--checkpoint-every 3";
  auto a = run_command(train_cnn(1, args + " --max-steps 6", straight));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  auto b = run_command(train_cnn(1, args + " --max-steps 3", split));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  auto c = run_command(train_cnn(1, args + " --max-steps 6 --resume", split));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto s = load_checkpoint((split / ckpt(6)).string());
  EXPECT_EQ(s.extra_int("scheduler_step"), 6);
  Distance d = distance(straight / ckpt(6), split / ckpt(6), straight / ckpt(3));
  EXPECT_EQ(d.apart, 0.0) << "resumed run vs straight run";
  EXPECT_GT(d.moved, 1e-4);
  fs::remove_all(straight);
  fs::remove_all(split);
}
