// distributed::parallelize over a one-rank NCCL group on one GPU: the ZeRO-1, ZeRO-2 and FSDP kinds
// (whose collectives, on one rank, still run through NCCL on the group's stream: bucket
// all-reduces or reduce-scatters, the shards' all-gathers) train a float32 GPT as the plain model
// does on the same GPU, losses and weights within float32 rounding, and their whole-layout state
// dicts hold the plain model's values; FSDP with bf16 compute (Note [FSDP mixed precision])
// within bf16's. Leaves out: two or more ranks (the Gloo tests of the same kinds, and the
// multi-GPU issue). Skipped without NCCL or without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "distributed/parallel/parallelize.h"
#include "nn/gpt.h"
#include "nn/optim/adam.h"
#include "train/step_runner.h"
#ifdef LOOM_WITH_NCCL
#include "distributed/process_group/nccl_process_group.h"
#include "distributed/store/tcp_store.h"
#endif

using namespace loom;
using namespace loom::distributed;

namespace {

#ifdef LOOM_WITH_NCCL
std::shared_ptr<ProcessGroup> one_rank_nccl() {
  TCPStoreOptions so;
  so.is_server = true;
  auto store = std::make_shared<TCPStore>("127.0.0.1", 0, so);
  return std::make_shared<NcclProcessGroup>(0, 1, store, std::chrono::seconds(60), 0);
}

std::shared_ptr<nn::GPT> tiny_gpt() {
  manual_seed(3);
  auto m = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab_size = 64, .block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 32});
  m->to(cuda_device(0));
  return m;
}

MakeOptimizer adamw() {
  return [](nn::Module& m) {
    return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
  };
}

// Four steps through the runner on fixed batches on the GPU; the losses.
std::vector<double> train4(train::StepRunner& runner) {
  Generator gen(7);
  std::vector<double> losses;
  for (int s = 0; s < 4; ++s) {
    Tensor x = randint(0, 64, {4, 16}, {.dtype = kI64}, &gen).to(cuda_device(0));
    Tensor y = randint(0, 64, {4, 16}, {.dtype = kI64}, &gen).to(cuda_device(0));
    losses.push_back(runner.step(x, y).item());
  }
  return losses;
}

double max_difference(const nn::StateDict& a, const nn::StateDict& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    // The parallel model's state dict is gathered to the host; the plain model's is on the GPU.
    const Tensor x = a[i].second.to(kCPU).to(kF32), y = b[i].second.to(kCPU).to(kF32);
    worst = std::max(worst, max(abs(x - y)).item());
  }
  return worst;
}
#endif

void need_nccl_and_gpu() {
#ifndef LOOM_WITH_NCCL
  GTEST_SKIP() << "loom was built without NCCL";
#else
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#endif
}

TEST(CudaParallelize, EveryKindOverOneNcclRankTrainsAsThePlainModel) {
  need_nccl_and_gpu();
  if (::testing::Test::IsSkipped()) return;
#ifdef LOOM_WITH_NCCL
  auto plain = tiny_gpt();
  auto plain_opt = adamw()(*plain);
  train::StepRunner reference(*plain, *plain_opt, 0.0, false);
  const std::vector<double> want = train4(reference);
  auto pg = one_rank_nccl();
  for (int zero : {1, 2, 3}) {
    auto parallel = parallelize(tiny_gpt(), {.zero = zero}, pg, adamw());
    const std::string kind = parallel->describe();
    train::StepRunner runner(*parallel, 0.0, false);
    const std::vector<double> got = train4(runner);
    // float32 on one GPU: the same kernels, but the optimizer's update runs over flat shards
    // (ZeRO) or FSDP's flat parameters, so sums may round differently; 1e-5 relative holds, and a
    // lost all-reduce or update moves a loss by 1e-2 or more.
    for (size_t s = 0; s < want.size(); ++s)
      EXPECT_NEAR(got[s], want[s], 1e-5 * std::fabs(want[s])) << kind << " step " << s;
    EXPECT_LE(max_difference(parallel->model_state_dict(), plain->state_dict()), 1e-5) << kind;
  }
  // FSDP computing in bfloat16 (its master weights stay float32): within bf16's rounding.
  auto bf16 = parallelize(tiny_gpt(), {.zero = 3, .fsdp_param_dtype = kBF16}, pg, adamw());
  train::StepRunner runner(*bf16, 0.0, false);
  const std::vector<double> got = train4(runner);
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_NEAR(got[s], want[s], 2e-2 * std::fabs(want[s])) << "FSDP bf16 step " << s;
#endif
}

}  // namespace
