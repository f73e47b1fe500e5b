// distributed::parallelize and the ParallelModel kinds in one process (a world of one): which kind
// each plan gives, that training through the interface equals training the plain model, the
// whole-layout state dicts (FSDP's gathered), the capture refusals and the plan's errors. The
// multi-process layouts (DDP, ZeRO, FSDP, tensor parallel over Gloo) are tested through the
// programs: tests/examples/test_train_gpt.cpp,
// TensorParallelEqualsOneProcessAndResumesAcrossLayouts and the ZeRO tests beside it.
#include <gtest/gtest.h>

#include "autograd/ops/ops.h"
#include "distributed/parallel/parallelize.h"
#include "distributed/process_group/local_process_group.h"
#include "nn/gpt.h"
#include "nn/optim/adam.h"
#include "support/errors.h"
#include "train/step_runner.h"

using namespace loom;
using namespace loom::distributed;

namespace {

std::shared_ptr<nn::GPT> tiny_gpt() {
  manual_seed(3);
  auto m = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16});
  m->to(kF64);
  return m;
}

std::shared_ptr<ProcessGroup> one_rank() {
  return std::make_shared<LocalProcessGroup>(std::chrono::seconds(10));
}

MakeOptimizer adamw() {
  return [](nn::Module& m) {
    return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
  };
}

// Three steps of `model` through the runner on fixed batches; the last loss.
double train3(train::StepRunner& runner) {
  Generator gen(7);
  double loss = 0;
  for (int s = 0; s < 3; ++s) {
    Tensor x = randint(0, 16, {4, 8}, {.dtype = kI64}, &gen);
    Tensor y = randint(0, 16, {4, 8}, {.dtype = kI64}, &gen);
    loss = runner.step(x, y).item();
  }
  return loss;
}

double max_difference(const nn::StateDict& a, const nn::StateDict& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    worst = std::max(worst, max(abs(a[i].second - b[i].second)).item());
  }
  return worst;
}

}  // namespace

TEST(Parallelize, EachPlanGivesItsKindAndTrainsAsThePlainModel) {
  auto plain = tiny_gpt();
  auto plain_opt = adamw()(*plain);
  train::StepRunner reference(*plain, *plain_opt, 0.0, false);
  const double want = train3(reference);
  for (int zero : {0, 1, 2, 3}) {
    auto model = tiny_gpt();
    auto parallel = parallelize(model, {.zero = zero}, one_rank(), adamw());
    const std::string kind = parallel->describe();
    const std::string want_kind = zero == 0   ? "one process"
                                  : zero == 3 ? "FSDP (ZeRO-3) over 1 process"
                                              : "ZeRO-" + std::to_string(zero) + " over 1 process";
    EXPECT_EQ(kind, want_kind);
    EXPECT_EQ(parallel->no_sync() != nullptr, zero == 1 || zero == 2) << kind;
    EXPECT_EQ(parallel->eval_forwards_are_collectives(), zero == 3) << kind;
    train::StepRunner runner(*parallel, 0.0, false);
    EXPECT_NEAR(train3(runner), want, 1e-12) << kind;
    // The whole layout: the plain model's names and values (FSDP's gathered from its shards).
    EXPECT_LE(max_difference(parallel->model_state_dict(), plain->state_dict()), 1e-12) << kind;
    ParallelModel::Memory m = parallel->memory();
    int64_t elements = 0;
    for (const Tensor& p : plain->parameters()) elements += p.numel();
    EXPECT_EQ(m.parameters, 8 * elements) << kind;  // float64, and the one rank holds them all
    EXPECT_EQ(m.optimizer_state, 2 * m.parameters) << kind;  // AdamW's two moments
  }
}

TEST(Parallelize, AWholeStateDictLoadsIntoEveryKind) {
  auto source = tiny_gpt();
  {
    NoGradGuard no_grad;
    for (auto& [name, t] : source->named_parameters()) t.add_(ones_like(t));  // unlike tiny_gpt()
  }
  for (int zero : {0, 2, 3}) {
    auto parallel = parallelize(tiny_gpt(), {.zero = zero}, one_rank(), adamw());
    int checked = 0;
    parallel->load_model_state_dict(source->state_dict(),
                                    [&](const nn::StateDict& mine) { checked = int(mine.size()); });
    EXPECT_EQ(checked, int(source->state_dict().size())) << parallel->describe();
    EXPECT_EQ(max_difference(parallel->model_state_dict(), source->state_dict()), 0.0)
        << parallel->describe();
  }
}

TEST(Parallelize, CaptureRefusalsAndBadPlansNameTheFlags) {
  auto fsdp = parallelize(tiny_gpt(), {.zero = 3}, one_rank(), adamw());
  test::expect_error([&] { fsdp->check_capturable("--cuda-graph"); },
                     {"--cuda-graph: FSDP (--zero 3)", "cannot capture"});
  test::expect_error([] { parallelize(tiny_gpt(), {.zero = 4}, one_rank(), adamw()); },
                     {"parallelize: --zero 4 is not a ZeRO stage"});
  test::expect_error([] { parallelize(tiny_gpt(), {.tp = 2}, one_rank(), adamw()); },
                     {"parallelize: --tp 2 x --pp 1 does not divide the 1 processes"});
  // FSDP over a pipeline's copies runs (pp_tool's zero=3), over tensor-parallel stages too (the
  // plan passes; one process is too few for it), but not with FSDP's own mixed precision (the plan
  // is refused before the world size is checked).
  test::expect_error(
      [] { parallelize(tiny_gpt(), {.zero = 3, .tp = 2, .pp = 2}, one_rank(), adamw()); },
      {"parallelize: --tp 2 x --pp 2 does not divide the 1 processes"});
  test::expect_error(
      [] {
        parallelize(tiny_gpt(), {.zero = 3, .pp = 2, .fsdp_param_dtype = kBF16}, one_rank(),
                    adamw());
      },
      {"--pp 2 with FSDP's mixed precision", "schedule's autocast"});
  test::expect_error(
      [] { parallelize(tiny_gpt(), {.sequence_parallel = true}, one_rank(), adamw()); },
      {"--sequence-parallel", "needs --tp 2 or more"});
}
