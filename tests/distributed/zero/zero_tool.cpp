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
// after the first step, "norms ..." and "skipped K". Two more modes, for Note [FSDP mixed
// precision] (distributed/fsdp/fsdp.h), both on the gpt=1 model and batches:
//   grads <out_dir>   N ranks: FSDP with bf16 units, one backward on this rank's rows of step 0's
//     batch; writes <out_dir>/grads_rank<r>.safetensors: "fsdp.<name>" the reduced gradient (the
//     ranks' fp32 shards all-gathered) and "local.<name>" the gradient of a plain bf16 model with
//     the same weights on the same rows, as fp32
//   mp_reference <world> <steps> <out_dir>   one process: what `train f32 3 <steps> ... gpt=1
//     mp=bf16` computes on <world> ranks, written out: fp32 master weights, a bf16 copy of them
//     computes each rank's gradient in turn, their fp32 mean (each scaled by 1/world, then summed
//     in rank order) goes to AdamW; writes <out_dir>/reference.safetensors
// Exit 0 = ran, 3 = the expected error.
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
#include "distributed/parallel/data_parallel_model.h"
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
  std::unique_ptr<ParallelModel> parallel;  // FSDP needs no no_sync: as one model
  if (ddp)
    parallel = std::make_unique<DDPModel>(ddp, opt);
  else
    parallel = std::make_unique<LocalModel>(*net, opt);
  train::StepRunner runner(*parallel, 0.0, false);
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

// ---------------------------------------------------------------- grads, mp_reference

// The loss the training step takes: the model's own where it has one (GPT's head and
// cross-entropy as one op; FSDP forwards it), as StepRunner does.
Tensor token_loss(nn::Module& m, const Tensor& x, const Tensor& y) {
  if (m.has_loss()) return m.loss(x, y);
  return cross_entropy(flatten(m(x), 0, 1), flatten(y));
}

// Step s's gpt=1 batch, rows [r * B / world, (r + 1) * B / world) (B = 24).
std::pair<Tensor, Tensor> rank_rows(int64_t s, int r, int world) {
  auto [x, y] = gpt_batch(test::ddp_case_batch(s, 24, kF32).first);
  const int64_t rows = 24 / world;
  return {x.slice(0, r * rows, (r + 1) * rows), y.slice(0, r * rows, (r + 1) * rows)};
}

// dst's parameters = src's, rounded to dst's dtype (the tied matrix once: named_parameters).
void copy_params(nn::Module& dst, nn::Module& src) {
  NoGradGuard no_grad;
  auto d = dst.named_parameters(), s = src.named_parameters();
  for (size_t i = 0; i < d.size(); ++i) d[i].second.copy_(s[i].second.to(d[i].second.dtype()));
}

int run_grads(const std::string& dir) {
  auto model = make_gpt(kF32, false);
  FullyShardedDataParallel f(model, nullptr, {.param_dtype = kBF16});
  auto plain = make_gpt(kF32, false);
  {
    auto scope = f.full_params();  // rank 0's fp32 weights, which every rank now holds
    copy_params(*plain, *model);
  }
  plain->to(kBF16);  // what a unit is gathered as: the master rounded to bf16
  auto [x, y] = rank_rows(0, g_rank, g_world);
  token_loss(f, x, y).backward();
  token_loss(*plain, x, y).backward();
  NamedTensors out;
  const auto names = model->named_parameters();  // the order of f.params()
  for (size_t u = 0; u < f.buckets().size(); ++u) {
    const Bucket& b = f.buckets()[u];
    Tensor whole = empty({b.numel}, {.dtype = b.shard.dtype()});
    f.process_group().all_gather(whole, b.shard)->wait();
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = f.params()[b.params[k]];
      Tensor g = make_view(whole, p.shape(), contiguous_strides(p.shape()), b.offsets[k]);
      out.emplace_back("fsdp." + names[b.params[k]].first, g.clone());
    }
  }
  for (auto& [k, p] : plain->named_parameters()) out.emplace_back("local." + k, p.grad().to(kF32));
  save_safetensors(dir + "/grads_rank" + std::to_string(g_rank) + ".safetensors", out);
  return 0;
}

int run_mp_reference(int world, int steps, const std::string& dir) {
  auto master = make_gpt(kF32, false);  // rank 0's initial weights (g_rank is 0 here)
  auto opt = make_optimizer(*master, "adamw");
  auto plain = make_gpt(kF32, false);
  plain->to(kBF16);
  auto mp = master->named_parameters(), pp = plain->named_parameters();
  for (int s = 0; s < steps; ++s) {
    copy_params(*plain, *master);
    std::vector<Tensor> mean(mp.size());
    for (int r = 0; r < world; ++r) {
      plain->zero_grad();
      auto [x, y] = rank_rows(s, r, world);
      token_loss(*plain, x, y).backward();
      NoGradGuard no_grad;
      for (size_t i = 0; i < mp.size(); ++i) {
        Tensor g = pp[i].second.grad().to(kF32) * (1.0 / double(world));
        mean[i] = r == 0 ? g : mean[i] + g;
      }
    }
    for (size_t i = 0; i < mp.size(); ++i) mp[i].second.set_grad(mean[i]);
    opt->step();
  }
  NamedTensors params;
  for (auto& [k, t] : master->named_parameters()) params.emplace_back(k, t.clone());
  save_safetensors(dir + "/reference.safetensors", params);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (!(mode == "train" && argc >= 6) && !(mode == "grads" && argc == 3) &&
      !(mode == "mp_reference" && argc == 5)) {
    std::cerr << "usage: zero_tool train <f32|f64> <zero> <steps> <out_dir> [key=value ...]\n"
                 "       zero_tool grads <out_dir>\n"
                 "       zero_tool mp_reference <world> <steps> <out_dir>\n";
    return 2;
  }
  try {
    const test::TestJob job = test::join_test_job();
    g_rank = job.rank, g_world = job.world, g_device = job.device;
    int rc = mode == "train"   ? run_training(argc, argv)
             : mode == "grads" ? run_grads(argv[2])
                               : run_mp_reference(std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
    destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "zero_tool: " << e.what() << "\n";
    return 3;
  }
}
