// A worker the tensor-parallel tests start N times (RANK, WORLD_SIZE, ... set; Gloo by default).
// Two modes:
//   train <gpt|llama|qwen2> <steps> [tp=N] [dp=N] [clip=X] [vocab=1] [sp=1] [T=N]
// builds the tiny model in float64 on every rank from one seed, twice: a reference that trains
// alone on the whole batch, and a copy split by parallelize_tensor over the mesh's tp group
// ({dp, tp}, tp = world / dp by default), wrapped in DDP over the dp group when dp > 1, each dp
// rank on its share of the batch. Both take `steps` AdamW steps (weight decay 0.1; with clip=X the
// gradients clipped to X first: clip_grad_norm_tensor_parallel_ against clip_grad_norm_; with
// vocab=1 (dp 1) the embedding and head split too, the loss vocab_parallel_loss; with sp=1 the
// blocks sequence parallel, sync_sequence_parallel_grads after each backward; T=N the sequence
// length, 8 by default). Prints "max loss diff A max weight diff W clip total diff C" and exits 0
// when every step's loss (the mean over the dp ranks), the clip's total norm and every weight of
// whole_state_dict equal the reference's within 1e-10, 1 otherwise.
//   dropout
// draws a SequenceParallelDropout (p 0.5) on each rank's (2, 4, 8) positions from the same seed;
// exits 0 when the ranks' masks differ (at most 3/4 of the elements agree with rank 0's), every
// kept element is scaled to 2, and the default generator moved by the counters of the whole
// (2, 4 world, 8) on every rank, 1 otherwise.
// Exit 3: an error was raised (its text printed).
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>

#include "../test_job.h"
#include "autograd/ops/ops.h"
#include "distributed/ddp/ddp.h"
#include "distributed/mesh/device_mesh.h"
#include "distributed/tensor_parallel/sequence_parallel.h"
#include "distributed/tensor_parallel/tensor_parallel.h"
#include "distributed/tensor_parallel/vocab_parallel.h"
#include "nn/clip.h"
#include "nn/gpt.h"
#include "nn/init.h"
#include "nn/llama.h"
#include "nn/optim/adam.h"

using namespace loom;
using namespace loom::distributed;

namespace {

constexpr int64_t kBatch = 4, kContext = 8, kVocab = 64;

std::map<std::string, std::string> keys(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

// What the flags of `train` ask for.
struct Layout {
  int dp = 1, tp = 1;
  double clip = 0.0;
  bool vocab = false, sp = false;
  int64_t T = kContext;
};

Layout layout(int world, const std::map<std::string, std::string>& kv) {
  auto flag = [&](const char* k) { return kv.count(k) && kv.at(k) == "1"; };
  Layout l;
  l.dp = kv.count("dp") ? std::stoi(kv.at("dp")) : 1;
  l.tp = kv.count("tp") ? std::stoi(kv.at("tp")) : world / l.dp;
  l.clip = kv.count("clip") ? std::stod(kv.at("clip")) : 0.0;
  l.vocab = flag("vocab"), l.sp = flag("sp");
  l.T = kv.count("T") ? std::stoll(kv.at("T")) : kContext;
  return l;
}

// The same weights on every rank and for both copies: the seed is fixed before each build.
std::shared_ptr<nn::Module> make_model(const std::string& kind) {
  manual_seed(1234);
  std::shared_ptr<nn::Module> m;
  if (kind == "gpt") {
    m = std::make_shared<nn::GPT>(nn::GPTConfig{
        .vocab_size = kVocab, .block_size = kContext, .n_layer = 2, .n_head = 4, .n_embd = 32});
  } else {
    nn::LlamaConfig c = nn::LlamaConfig::preset("tiny");  // 4 heads, 2 key/value heads, F 128
    c.vocab_size = kVocab;
    c.qkv_bias = kind == "qwen2";  // q, k and v biases, split with their rows
    m = std::make_shared<nn::Llama>(c);
    for (const auto& [name, p] : m->named_parameters())
      if (name.ends_with(".bias")) nn::init::normal_(p, 0.0, 0.1);  // not the zeros they start as
  }
  m->to(kF64);
  return m;
}

// Rows [first, first + rows) of step s's batch: (rows, T) ids and the next ids as targets.
std::pair<Tensor, Tensor> batch(int step, int64_t first, int64_t rows, int64_t T) {
  std::vector<int64_t> ids, next;
  for (int64_t b = first; b < first + rows; ++b)
    for (int64_t t = 0; t < T; ++t) {
      auto id = [&](int64_t u) { return (step * 31 + b * 7 + u * 3 + u * u * b) % kVocab; };
      ids.push_back(id(t));
      next.push_back(id(t + 1));
    }
  return {from_vector(ids, {rows, T}), from_vector(next, {rows, T})};
}

optim::AdamWOptions adamw() { return {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1}; }

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.to(kF64) - b.to(kF64))).item();
}

// The model split over the mesh as the layout says, and what its loss needs.
struct Split {
  std::shared_ptr<nn::Module> model;
  std::shared_ptr<DistributedDataParallel> ddp;  // dp > 1
  VocabShard shard;                              // vocab
  int linears = 0;                               // split by parallelize_tensor

  Tensor loss(const Tensor& x, const Tensor& y, const Layout& l, ProcessGroup& tp) {
    if (l.vocab) {
      if (auto* g = dynamic_cast<nn::GPT*>(model.get()))
        return vocab_parallel_loss(g->hidden(x), shard, y, tp);
      return vocab_parallel_loss(dynamic_cast<nn::Llama&>(*model).hidden(x), shard, y, tp);
    }
    return ddp ? ddp->loss(x, y) : model->loss(x, y);
  }
};

Split split_model(const std::string& kind, const Layout& l, DeviceMesh& mesh) {
  Split s;
  s.model = make_model(kind);
  s.linears = parallelize_tensor(*s.model, mesh.group("tp"), {.sequence_parallel = l.sp});
  if (l.vocab) s.shard = parallelize_vocabulary(*s.model, mesh.group("tp"));
  if (l.dp > 1) s.ddp = std::make_shared<DistributedDataParallel>(s.model, mesh.group("dp"));
  return s;
}

// The largest difference between whole_state_dict(model) and ref's weights; -1 when one is missing
// or of another shape.
double weight_diff(nn::Module& model, const nn::Module& ref, int rank) {
  double diff = 0;
  nn::StateDict whole = whole_state_dict(model), expected = ref.state_dict();
  for (const auto& [name, t] : expected) {
    const Tensor* got = nn::find(whole, name);
    if (!got || got->shape() != t.shape()) {
      std::cout << "rank " << rank << ": " << name << " missing or of another shape\n";
      return -1;
    }
    diff = std::max(diff, max_diff(*got, t));
  }
  return diff;
}

int train(const std::string& kind, int steps, const std::map<std::string, std::string>& kv) {
  test::TestJob job = test::join_test_job();
  const Layout l = layout(job.world, kv);
  DeviceMesh mesh({{"dp", l.dp}, {"tp", l.tp}});
  ProcessGroup& tp = *mesh.group("tp");
  auto ref = make_model(kind);
  Split s = split_model(kind, l, mesh);
  optim::AdamW opt(s.model->parameters(), adamw()), ref_opt(ref->parameters(), adamw());
  double loss_diff = 0, clip_diff = 0;
  const int64_t rows = kBatch / l.dp, first = mesh.coordinate("dp") * rows;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, first, rows, l.T);
    auto [rx, ry] = batch(step, 0, kBatch, l.T);
    opt.zero_grad();
    ref_opt.zero_grad();
    Tensor loss = s.loss(x, y, l, tp), ref_loss = ref->loss(rx, ry);
    loss.backward();
    ref_loss.backward();
    if (l.sp) sync_sequence_parallel_grads(*s.model, tp);
    if (l.clip > 0) {
      Tensor total = clip_grad_norm_tensor_parallel_(*s.model, l.clip, tp);
      Tensor ref_total = nn::clip_grad_norm_(ref->parameters(), l.clip);
      clip_diff = std::max(clip_diff, std::abs(total.item() - ref_total.item()));
    }
    opt.step();
    ref_opt.step();
    Tensor mean = loss.detach().clone();
    mesh.group("dp")->all_reduce(mean, distributed::ReduceOp::Avg)->wait();
    loss_diff = std::max(loss_diff, std::abs(mean.item() - ref_loss.item()));
  }
  const double weights = weight_diff(*s.model, *ref, job.rank);
  std::cout << "rank " << job.rank << " split " << s.linears << " max loss diff " << loss_diff
            << " max weight diff " << weights << " clip total diff " << clip_diff << "\n";
  const bool ok =
      s.linears > 0 && loss_diff < 1e-10 && weights >= 0 && weights < 1e-10 && clip_diff < 1e-10;
  return ok ? 0 : 1;
}

// Every rank's (2, 4, 8) draw of a SequenceParallelDropout, from the same seed (mode `dropout`).
int dropout_draws() {
  test::TestJob job = test::join_test_job();
  DeviceMesh mesh({{"tp", job.world}});
  SequenceParallelDropout drop(0.5, mesh.group("tp"));
  manual_seed(7);
  Tensor y = drop(ones({2, 4, 8}, {.dtype = kF64}));
  Tensor all = empty({job.world * 64}, {.dtype = kF64});
  mesh.group("tp")->all_gather(all, contiguous(reshape(y, {-1})))->wait();
  const Tensor mine = slice(all, 0, job.rank * 64, (job.rank + 1) * 64),
               first = slice(all, 0, 0, 64);
  const double agree = sum(to(eq(mine, first), kF64)).item() / 64.0;
  const double kept_wrong = sum(to(gt(abs(mine * (mine - 2.0)), 1e-12), kF64)).item();  // not 0, 2
  const uint64_t moved = default_generator().state().offset;
  std::cout << "rank " << job.rank << " agrees with rank 0 at " << agree << " of the elements, "
            << kept_wrong << " kept elements not 2, generator moved " << moved << "\n";
  const bool differs = job.rank == 0 || agree <= 0.75;
  return differs && kept_wrong == 0 && moved == uint64_t(job.world * 64) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "dropout" && (argc < 4 || mode != "train")) {
    std::cerr << "usage: tp_tool train <gpt|llama|qwen2> <steps> [tp=N] [dp=N] [clip=X] [vocab=1] "
                 "[sp=1] [T=N] | tp_tool dropout\n";
    return 2;
  }
  try {
    if (mode == "dropout") return dropout_draws();
    return train(argv[2], std::atoi(argv[3]), keys(argc, argv, 4));
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 3;
  }
}
