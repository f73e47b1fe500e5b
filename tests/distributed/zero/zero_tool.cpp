// A worker the ZeRO tests start N times (RANK, WORLD_SIZE, ... set; backend from
// LOOM_TEST_BACKEND, tensors on cuda:LOCAL_RANK for nccl). One mode:
//   train <f32|f64> <zero 0|1|2|3> <steps> <out_dir> [key=value ...]
// the ddp_case problem (a global batch of 24 rows, each rank its share of them) through
// train::StepRunner, with DDP (zero 0), DDP and a ZeroOptimizer over the program's optimizer
// (1, 2), or FullyShardedDataParallel and a stage-3 ZeroOptimizer (3). Keys:
//   opt=sgd|adamw  (adamw: two groups, weight decay on the 2-D weights only)   accum=K  clip=X
//   batch=B (global rows per step, default 24, split evenly)   cap=BYTES (bucket caps)   wide=1 (a
//   8-512-512-4 MLP, for the memory figures)   gpt=1 (a 2-layer GPT of width 16 over 16 tokens,
//   windows of 8 from the same batches: the ids are the rows' signs; tied embedding)
//   ckpt=1 (with gpt=1: activation checkpointing per block)   mp=bf16 (zero 3: units gathered
//   and computed in bf16 over fp32 shards; other zeros: bf16 autocast, the comparable run)
//   save_at=S (after step S, rank 0 writes <out_dir>/ckpt.safetensors: model and optimizer)
//   load=PATH (start from such a file, at the step it names)   inf_at=S (rank 0 puts an inf in its
//   first gradient element before the update of step S: GradScaler, fp16 autocast)
// Writes <out_dir>/final_rank<r>.safetensors and prints "memory params G grads S state T live L"
// after the first step, "norms ..." and "skipped K". Exit 0 = ran, 3 = the expected error.
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <tuple>

#include "../ddp/ddp_case.h"
#include "../test_job.h"
#include "autograd/amp/autocast.h"
#include "core/allocator.h"
#include "core/cuda/available.h"
#include "distributed/env.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/world.h"
#include "distributed/zero/zero_optimizer.h"
#include "nn/amp/grad_scaler.h"
#include "nn/gpt.h"
#include "nn/optim/adam.h"
#include "nn/serialize.h"
#include "train/step_runner.h"

using namespace loom;
using namespace loom::distributed;

namespace {
Device g_device;
int g_rank = 0, g_world = 1;

std::map<std::string, std::string> kv(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

constexpr int64_t kGptT = 8;

std::shared_ptr<nn::Module> make_gpt(DType dt, bool checkpointing) {
  manual_seed(100 + uint64_t(g_rank));
  nn::GPTConfig c{.vocab_size = 16, .block_size = kGptT, .n_layer = 2, .n_head = 2, .n_embd = 16};
  auto m = std::make_shared<nn::GPT>(c);
  m->set_activation_checkpointing(checkpointing);
  m->to(dt);
  return m;
}

// The ddp_case batch as token windows: (rows, 8) ids in 0..15 from the signs of x's columns
// and the position; targets: the position's id with the sign of the next column.
std::pair<Tensor, Tensor> gpt_batch(const Tensor& x) {
  Tensor sign = gt(x, 0.0).to(DType::I64) * 8;                           // (rows, 8)
  Tensor pos = arange(0.0, double(kGptT), 1.0, {.dtype = DType::I64});   // (8,)
  Tensor next = cat({sign.slice(1, 1, kGptT), sign.slice(1, 0, 1)}, 1);  // rolled by one
  return {sign + pos, next + pos};
}

std::shared_ptr<nn::Module> make_model(DType dt, bool wide) {
  if (!wide) return test::ddp_case_model(dt, 100 + uint64_t(g_rank));
  manual_seed(100 + uint64_t(g_rank));
  auto m = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(test::kIn, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(512, test::kClasses));
  m->to(dt);
  return m;
}

std::unique_ptr<optim::Optimizer> make_optimizer(nn::Module& m, const std::string& kind) {
  if (kind == "sgd")
    return std::make_unique<optim::SGD>(m.parameters(),
                                        optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  std::vector<Tensor> decay, no_decay;
  for (const Tensor& p : m.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto adamw =
      std::make_unique<optim::AdamW>(decay, optim::AdamWOptions{.lr = 3e-3, .weight_decay = 0.1});
  adamw->add_param_group(no_decay, {.lr = 3e-3, .weight_decay = 0.0});
  return adamw;
}

int64_t live_bytes() {
#ifdef LOOM_WITH_CUDA
  if (g_device.is_cuda()) return int64_t(cuda::memory_stats(g_device.index).allocated);
#endif
  return int64_t(cpu_alloc_stats().live_bytes);
}

// The GradScaler's step written out, so that `poison` can put an inf into the first gradient
// element this rank updates (a shard element no other rank holds, under ZeRO) before unscale_.
void step_with_inf(nn::Module& net, optim::Optimizer& opt, amp::GradScaler& scaler, const Tensor& x,
                   const Tensor& y, bool poison) {
  opt.zero_grad();
  Tensor loss;
  {
    amp::Autocast autocast(kF16);
    loss = cross_entropy(net(x), y);
  }
  scaler.scale(loss).backward();
  if (poison) {
    Tensor g = opt.all_params().at(0).grad();
    NoGradGuard no_grad;
    make_view(g, {1}, {1}, g.offset()).fill_(std::numeric_limits<double>::infinity());
  }
  scaler.step(opt);
  scaler.update();
}

int run_training(int argc, char** argv) {
  const DType dt = std::string(argv[2]) == "f64" ? kF64 : kF32;
  const int zero = std::atoi(argv[3]), steps = std::atoi(argv[4]);
  const std::string dir = argv[5];
  auto o = kv(argc, argv, 6);
  const int accum = o.count("accum") ? std::stoi(o["accum"]) : 1;
  const int inf_at = o.count("inf_at") ? std::stoi(o["inf_at"]) : -1;
  const bool gpt = o.count("gpt") > 0;
  auto model = gpt ? make_gpt(dt, o.count("ckpt") > 0) : make_model(dt, o.count("wide") > 0);
  model->to(g_device);
  std::shared_ptr<nn::Module> net;  // DDP (zero 0, 1, 2) or FSDP (zero 3)
  std::shared_ptr<FullyShardedDataParallel> fsdp;
  std::shared_ptr<DistributedDataParallel> ddp;
  if (zero == 3) {
    FSDPOptions fo;
    if (o.count("mp")) fo.param_dtype = kBF16;
    net = fsdp = std::make_shared<FullyShardedDataParallel>(model, nullptr, fo);
  } else {
    DDPOptions dopt = ddp_options_for_zero(zero);
    if (o.count("cap"))
      dopt.reducer.first_bucket_cap_bytes = dopt.reducer.bucket_cap_bytes = std::stoul(o["cap"]);
    net = ddp = std::make_shared<DistributedDataParallel>(model, nullptr, dopt);
  }
  auto full = make_optimizer(*model, o.count("opt") ? o["opt"] : "adamw");
  std::unique_ptr<ZeroOptimizer> sharded;
  if (zero == 3) sharded = std::make_unique<ZeroOptimizer>(*fsdp, *full);
  if (zero == 1 || zero == 2) sharded = std::make_unique<ZeroOptimizer>(*ddp, *full);
  optim::Optimizer& opt = sharded ? *sharded : *full;
  // FSDP: the model's parameters are whole only inside this scope (state_dict, load_state_dict).
  auto whole = [&](bool writeback) { return fsdp ? fsdp->full_params(writeback) : nullptr; };
  int start = 0;
  if (o.count("load")) {
    auto st = load_safetensors(o["load"]).tensors;
    nn::StateDict msd, osd;
    for (auto& [k, t] : st) {
      if (k == "step")
        start = int(t.item());
      else if (k.rfind("model.", 0) == 0)
        msd.emplace_back(k.substr(6), t);
      else
        osd.emplace_back(k.substr(4), t);  // "opt."
    }
    {
      auto scope = whole(/*writeback=*/true);
      model->load_state_dict(msd);
    }
    opt.load_state_dict(osd);
  }
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 1000, .enabled = inf_at >= 0});
  train::StepRunner runner(*net, opt, 0.0, false, ddp.get());
  if (inf_at >= 0) runner.set_amp(kF16, &scaler);
  if (o.count("mp") && zero != 3) runner.set_amp(kBF16, nullptr);
  runner.set_grad_accum(accum);
  if (o.count("clip")) runner.set_grad_clip(std::stod(o["clip"]));
  const int64_t batch = o.count("batch") ? std::stoi(o["batch"]) : 24;  // global rows per step
  const int64_t rows = batch / g_world;                                 // this rank's
  std::string norms;
  double last_loss = 0;
  for (int s = start; s < steps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, batch, dt);
    if (gpt) std::tie(x, y) = gpt_batch(x);
    Tensor xr = x.slice(0, g_rank * rows, (g_rank + 1) * rows).to(g_device);
    Tensor yr = y.slice(0, g_rank * rows, (g_rank + 1) * rows).to(g_device);
    if (inf_at >= 0)
      step_with_inf(*net, opt, scaler, xr, yr, s == inf_at && g_rank == 0);
    else
      last_loss = runner.step(xr, yr).item();
    if (o.count("clip")) norms += " " + std::to_string(runner.grad_norm().item());
    if (s == start) {
      auto m = sharded ? sharded->memory() : ZeroOptimizer::Memory{};
      std::cout << "memory params " << m.parameters << " grads " << m.gradients << " state "
                << m.optimizer_state << " live " << live_bytes() << "\n";
    }
    if (o.count("save_at") && s + 1 == std::stoi(o["save_at"])) {
      NamedTensors out{{"step", from_vector(std::vector<double>{double(s + 1)}, {1})}};
      {
        auto scope = whole(false);
        for (auto& [k, t] : model->state_dict()) out.emplace_back("model." + k, t.to(kCPU).clone());
      }
      for (auto& [k, t] : opt.state_dict()) out.emplace_back("opt." + k, t.to(kCPU));
      if (g_rank == 0) save_safetensors(dir + "/ckpt.safetensors", out);
    }
  }
  NamedTensors params;
  {
    auto scope = whole(false);
    for (auto& [k, t] : model->named_parameters()) params.emplace_back(k, t.to(kCPU).clone());
  }
  save_safetensors(dir + "/final_rank" + std::to_string(g_rank) + ".safetensors", params);
  std::cout << "norms" << norms << "\nskipped " << scaler.skipped_steps() << "\nlast loss "
            << last_loss << "\n";
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 6 || std::string(argv[1]) != "train") {
    std::cerr << "usage: zero_tool train <f32|f64> <zero> <steps> <out_dir> [key=value ...]\n";
    return 2;
  }
  try {
    const test::TestJob job = test::join_test_job();
    g_rank = job.rank, g_world = job.world, g_device = job.device;
    int rc = run_training(argc, argv);
    destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "zero_tool: " << e.what() << "\n";
    return 3;
  }
}
