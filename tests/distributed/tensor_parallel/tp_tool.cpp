// A worker the tensor-parallel tests start N times (RANK, WORLD_SIZE, ... set; Gloo by default).
// One mode:
//   train <gpt|llama> <steps> [tp=N] [dp=N] [clip=X] [vocab=1]
// builds the tiny model in float64 on every rank from one seed, twice: a reference that trains
// alone on the whole batch, and a copy split by parallelize_tensor over the mesh's tp group
// ({dp, tp}, tp = world / dp by default), wrapped in DDP over the dp group when dp > 1, each dp
// rank on its share of the batch. Both take `steps` AdamW steps (weight decay 0.1; with clip=X the
// gradients clipped to X first: clip_grad_norm_tensor_parallel_ against clip_grad_norm_; with
// vocab=1 (dp 1) the embedding and head split too, the loss vocab_parallel_loss). Prints
// "max loss diff A max weight diff W clip total diff C" and exits 0 when every step's loss (the
// mean over the dp ranks), the clip's total norm and every weight of whole_state_dict equal the
// reference's within 1e-10, 1 otherwise. Exit 3: an error was raised (its text printed).
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "../test_job.h"
#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/mesh/device_mesh.h"
#include "distributed/tensor_parallel/tensor_parallel.h"
#include "distributed/tensor_parallel/vocab_parallel.h"
#include "nn/clip.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "nn/optim/adam.h"

using namespace loom;
using namespace loom::distributed;

namespace {

constexpr int64_t kBatch = 4, kT = 8;

std::map<std::string, std::string> keys(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

// The same weights on every rank and for both copies: the seed is fixed before each build.
std::shared_ptr<nn::Module> make_model(const std::string& kind, int64_t vocab) {
  manual_seed(1234);
  std::shared_ptr<nn::Module> m;
  if (kind == "gpt") {
    m = std::make_shared<nn::GPT>(nn::GPTConfig{
        .vocab_size = vocab, .block_size = kT, .n_layer = 2, .n_head = 4, .n_embd = 32});
  } else {
    nn::LlamaConfig c = nn::LlamaConfig::preset("tiny");  // 4 heads, 2 key/value heads, F 128
    c.vocab_size = vocab;
    m = std::make_shared<nn::Llama>(c);
  }
  m->to(kF64);
  return m;
}

// Rows [first, first + rows) of step s's batch: (rows, T) ids and the next ids as targets.
std::pair<Tensor, Tensor> batch(int step, int64_t first, int64_t rows, int64_t vocab) {
  std::vector<int64_t> ids, next;
  for (int64_t b = first; b < first + rows; ++b)
    for (int64_t t = 0; t < kT; ++t) {
      auto id = [&](int64_t u) { return (step * 31 + b * 7 + u * 3 + u * u * b) % vocab; };
      ids.push_back(id(t));
      next.push_back(id(t + 1));
    }
  return {from_vector(ids, {rows, kT}), from_vector(next, {rows, kT})};
}

optim::AdamWOptions adamw() { return {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1}; }

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

int train(const std::string& kind, int steps, const std::map<std::string, std::string>& kv) {
  test::TestJob job = test::join_test_job();
  const int dp = kv.count("dp") ? std::stoi(kv.at("dp")) : 1;
  const int tp = kv.count("tp") ? std::stoi(kv.at("tp")) : job.world / dp;
  const double clip = kv.count("clip") ? std::stod(kv.at("clip")) : 0.0;
  DeviceMesh mesh({{"dp", dp}, {"tp", tp}});
  const int64_t vocab = 64;
  auto ref = make_model(kind, vocab);
  auto model = make_model(kind, vocab);
  const int split = parallelize_tensor(*model, mesh.group("tp"));
  const bool split_vocab = kv.count("vocab") && kv.at("vocab") == "1";
  VocabShard shard;
  if (split_vocab) shard = parallelize_vocabulary(*model, mesh.group("tp"));
  auto hidden = [&](const Tensor& x) {
    if (auto* g = dynamic_cast<nn::GPT*>(model.get())) return g->hidden(x);
    return dynamic_cast<nn::Llama&>(*model).hidden(x);
  };
  std::shared_ptr<DistributedDataParallel> ddp;
  if (dp > 1) ddp = std::make_shared<DistributedDataParallel>(model, mesh.group("dp"));
  optim::AdamW opt(model->parameters(), adamw()), ref_opt(ref->parameters(), adamw());
  double loss_diff = 0, clip_diff = 0;
  const int64_t rows = kBatch / dp, first = mesh.coordinate("dp") * rows;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, first, rows, vocab);
    auto [rx, ry] = batch(s, 0, kBatch, vocab);
    opt.zero_grad();
    ref_opt.zero_grad();
    Tensor loss = split_vocab ? vocab_parallel_loss(hidden(x), shard, y, *mesh.group("tp"))
                  : ddp       ? ddp->loss(x, y)
                              : model->loss(x, y);
    Tensor ref_loss = ref->loss(rx, ry);
    loss.backward();
    ref_loss.backward();
    if (clip > 0) {
      Tensor total = clip_grad_norm_tensor_parallel_(*model, clip, *mesh.group("tp"));
      Tensor ref_total = nn::clip_grad_norm_(ref->parameters(), clip);
      clip_diff = std::max(clip_diff, std::abs(total.item() - ref_total.item()));
    }
    opt.step();
    ref_opt.step();
    Tensor mean = loss.detach().clone();
    mesh.group("dp")->all_reduce(mean, distributed::ReduceOp::Avg)->wait();
    loss_diff = std::max(loss_diff, std::abs(mean.item() - ref_loss.item()));
  }
  double weight_diff = 0;
  nn::StateDict whole = whole_state_dict(*model), expected = ref->state_dict();
  for (const auto& [name, t] : expected) {
    const Tensor* got = nn::find(whole, name);
    if (!got || got->shape() != t.shape()) {
      std::cout << "rank " << job.rank << ": " << name << " missing or of another shape\n";
      return 1;
    }
    weight_diff = std::max(weight_diff, max_diff(*got, t));
  }
  std::cout << "rank " << job.rank << " split " << split << " max loss diff " << loss_diff
            << " max weight diff " << weight_diff << " clip total diff " << clip_diff << "\n";
  const bool ok = split > 0 && loss_diff < 1e-10 && weight_diff < 1e-10 && clip_diff < 1e-10;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || std::string(argv[1]) != "train") {
    std::cerr << "usage: tp_tool train <gpt|llama> <steps> [tp=N] [dp=N] [clip=X]\n";
    return 2;
  }
  try {
    return train(argv[2], std::atoi(argv[3]), keys(argc, argv, 4));
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 3;
  }
}
