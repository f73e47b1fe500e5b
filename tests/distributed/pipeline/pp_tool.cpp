// A worker the pipeline tests start N times (RANK, WORLD_SIZE, ... set; Gloo). Three modes:
//   train <gpt|llama> <steps> [pp=N] [dp=N] [tp=N] [micro=M] [schedule=gpipe|1f1b|interleaved]
//         [virtual=V] [layers=L] [clip=X] [sp=1] [grads=second|dp]
// builds the model (L blocks, 4 by default) in float64 on every rank from one seed, twice: a
// reference that trains alone on the whole batch of 8 rows, and a copy cut into pipeline stages
// over the mesh's pp group ({pp, dp, tp}; pp = world / (dp tp) by default; V chunks per rank:
// rank_chunks), split by parallelize_tensor when tp > 1, each dp rank on its share of the rows
// (their gradients averaged over dp by hand); grads=second sends the gradients back on a second pp
// group, grads=dp on the dp group (to be refused). Both take `steps` AdamW steps (with clip=X:
// clip_grad_norm_pipeline_ against clip_grad_norm_; not with tp > 1). Prints "max loss diff A max
// weight diff W" and exits 0 when every step's loss and every parameter of this rank's chunks
// (gathered whole over tp) equal the reference's within 1e-7,
// 1 otherwise; 3 when an error was raised (its text printed). Why 1e-7: the micro-batches'
// gradients are summed in another order than the whole batch's (a rounding of 1e-16 relative), and
// AdamW divides each update by sqrt(v), which magnifies that for a parameter whose gradient is near
// 0: Llama in 4 stages reaches 1.3e-8 after 20 steps; the bugs the tests name give 1e-3 and more.
//   model <gpt|llama> [tp=N] [dp=N] [zero=1|2|3] [virtual=V] [layers=L] [sp=1]
// the same two models, the copy through distributed::parallelize with pp = world / (tp dp)
// (PipelineModel; ZeRO over the dp copies with zero=Z; virtual=V: the interleaved schedule with V
// chunks per rank; sp=1: sequence parallel over tp): 3 AdamW steps each with the clip at 0.5,
// then checks that this rank holds exactly its stage's parameter bytes (memory() against the
// stage's held() tensors of an unreleased model, and a parameter of another stage refused by
// name) and AdamW's two moments of them (1 / dp under ZeRO, within 1%), that
// train::evaluate_classifier over the windows (each replica its half under dp; batches of 4, the
// last one short) gives the reference's loss and accuracy within 1e-9, and that the gathered
// model_state_dict and optimizer_state_dict on the pipeline's first rank are the reference's
// (1e-7), and the gradients' norm before each clip one process's (1e-9 relative: the clip and
// AdamW's nearly scale-free update would hide gradients that are k times too large, as FSDP's
// reduce-scatter summing over dp instead of averaging made them). Prints "stage S bytes B ...
// weight diff W" and exits 0, 1 or 3 as above.
//   scaler <gpt|llama> [virtual=V]
// one pipeline over every rank, one step with and without a GradScaler (scaler_mode's comment).
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <string>

#include "../test_job.h"
#include "autograd/ops/ops.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "distributed/mesh/device_mesh.h"
#include "distributed/parallel/parallelize.h"
#include "distributed/pipeline/schedule.h"
#include "distributed/tensor_parallel/tensor_parallel.h"
#include "nn/amp/grad_scaler.h"
#include "nn/clip.h"
#include "nn/gpt.h"
#include "nn/llama.h"
#include "nn/optim/adam.h"
#include "train/evaluate.h"

using namespace loom;
using namespace loom::distributed;

namespace {

constexpr int64_t kBatch = 8, kT = 8, kVocab = 64;

std::map<std::string, std::string> keys(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

int key(const std::map<std::string, std::string>& kv, const std::string& k, int fallback) {
  return kv.count(k) ? std::stoi(kv.at(k)) : fallback;
}

std::shared_ptr<nn::Module> make_model(const std::string& kind, int layers = 4) {
  manual_seed(4321);
  std::shared_ptr<nn::Module> m;
  if (kind == "gpt") {
    m = std::make_shared<nn::GPT>(nn::GPTConfig{
        .vocab_size = kVocab, .block_size = kT, .n_layer = layers, .n_head = 4, .n_embd = 32});
  } else {
    nn::LlamaConfig c = nn::LlamaConfig::preset("tiny");  // untied head, 2 key/value heads
    c.vocab_size = kVocab, c.n_layers = layers;
    m = std::make_shared<nn::Llama>(c);
  }
  m->to(kF64);
  return m;
}

std::pair<Tensor, Tensor> batch(int step, int64_t first, int64_t rows) {
  std::vector<int64_t> ids, next;
  for (int64_t b = first; b < first + rows; ++b)
    for (int64_t t = 0; t < kT; ++t) {
      auto id = [&](int64_t u) { return (step * 17 + b * 5 + u * 3 + u * u * (b + 1)) % kVocab; };
      ids.push_back(id(t));
      next.push_back(id(t + 1));
    }
  return {from_vector(ids, {rows, kT}), from_vector(next, {rows, kT})};
}

optim::AdamWOptions adamw() { return {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1}; }

// The trainable parameters of the rank's chunks, each once.
std::vector<Tensor> chunk_parameters(const std::vector<PipelineStage*>& chunks) {
  std::vector<Tensor> out;
  std::set<const TensorImpl*> seen;
  for (const PipelineStage* st : chunks)
    for (const Tensor& p : st->parameters())
      if (seen.insert(p.impl()).second) out.push_back(p);
  return out;
}

// The names of the rank's chunks' parameters in the model.
std::set<std::string> stage_names(const nn::Module& model,
                                  const std::vector<PipelineStage*>& chunks) {
  std::set<std::string> out;
  for (const auto& [name, p] : model.named_parameters())
    for (const Tensor& q : chunk_parameters(chunks))
      if (p.is_same(q)) out.insert(name);
  return out;
}

PipelineSchedule schedule_of(const std::map<std::string, std::string>& kv) {
  const std::string s = kv.count("schedule") ? kv.at("schedule") : "1f1b";
  if (s == "gpipe") return PipelineSchedule::GPipe;
  return s == "interleaved" ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB;
}

// "[0, 1) [2, 3)": the blocks of the rank's chunks.
std::string blocks_of(const std::vector<PipelineStage*>& chunks) {
  std::string out;
  for (const PipelineStage* st : chunks)
    out += (out.empty() ? "[" : " [") + std::to_string(st->first_block()) + ", " +
           std::to_string(st->end_block()) + ")";
  return out;
}

void average_over(const std::vector<Tensor>& params, ProcessGroup& dp) {
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) dp.all_reduce(g, distributed::ReduceOp::Avg)->wait();
  }
}

int train_mode(const std::string& kind, int steps, const std::map<std::string, std::string>& kv) {
  test::TestJob job = test::join_test_job();
  const int dp = key(kv, "dp", 1), tp = key(kv, "tp", 1), pp = key(kv, "pp", job.world / (dp * tp));
  const int micro = key(kv, "micro", 2), V = key(kv, "virtual", 1), L = key(kv, "layers", 4);
  const double clip = kv.count("clip") ? std::stod(kv.at("clip")) : 0.0;
  PipelineOptions po{.micro_batches = micro, .schedule = schedule_of(kv)};
  DeviceMesh mesh({{"pp", pp}, {"dp", dp}, {"tp", tp}});
  const std::string grads = kv.count("grads") ? kv.at("grads") : "";
  std::shared_ptr<ProcessGroup> second = grads == "second" ? mesh.another_group("pp") : nullptr;
  if (grads == "second") po.gradients = second.get();
  if (grads == "dp") po.gradients = mesh.group("dp").get();
  auto ref = make_model(kind, L), model = make_model(kind, L);
  parallelize_tensor(*model, mesh.group("tp"), {.sequence_parallel = kv.count("sp") > 0});
  auto owned = rank_chunks(*model, mesh.coordinate("pp"), pp, V);
  std::vector<PipelineStage*> chunks;
  for (const auto& c : owned) chunks.push_back(c.get());
  const std::vector<Tensor> params = chunk_parameters(chunks);
  optim::AdamW opt(params, adamw()), ref_opt(ref->parameters(), adamw());
  const int64_t rows = kBatch / dp, first = mesh.coordinate("dp") * rows;
  double loss_diff = 0;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = batch(s, first, rows);
    auto [rx, ry] = batch(s, 0, kBatch);
    opt.zero_grad(), ref_opt.zero_grad();
    Tensor loss = pipeline_forward_backward(chunks, x, y, *mesh.group("pp"), po);
    Tensor ref_loss = ref->loss(rx, ry);
    ref_loss.backward();
    if (dp > 1) average_over(params, *mesh.group("dp"));
    if (clip > 0) {
      clip_grad_norm_pipeline_(chunks, clip, *mesh.group("pp"));
      nn::clip_grad_norm_(ref->parameters(), clip);
    }
    opt.step(), ref_opt.step();
    mesh.group("dp")->all_reduce(loss, distributed::ReduceOp::Avg)->wait();
    loss_diff = std::max(loss_diff, std::abs(loss.item() - ref_loss.item()));
  }
  nn::StateDict whole = whole_state_dict(*model), expected = ref->state_dict();
  double weight_diff = 0;
  for (const std::string& name : stage_names(*model, chunks)) {
    const Tensor* got = nn::find(whole, name);
    const Tensor* want = nn::find(expected, name);
    if (!got || !want) return std::cout << "no " << name << "\n", 1;
    weight_diff = std::max(weight_diff, max(abs(*got - *want)).item());
  }
  std::cout << "rank " << job.rank << " blocks " << blocks_of(chunks) << " bubble "
            << pipeline_bubble(pp, micro, V) << " max loss diff " << loss_diff
            << " max weight diff " << weight_diff << "\n";
  return loss_diff < 1e-7 && weight_diff < 1e-7 ? 0 : 1;
}

// The model mode's evaluation windows: 18 (5 batches of 4, the last one of 2), or under dp
// replica r's half of them (every other window).
data::DataLoader eval_windows(int replica, int replicas) {
  std::vector<Tensor> xs, ys;
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = batch(100 + s, 0, 6);
    xs.push_back(x), ys.push_back(y);
  }
  Tensor x = cat(xs, 0), y = cat(ys, 0);
  if (replicas > 1) {
    std::vector<int64_t> rows;
    for (int64_t i = replica; i < x.size(0); i += replicas) rows.push_back(i);
    Tensor idx = from_vector(rows, {int64_t(rows.size())});
    x = index_select(x, 0, idx), y = index_select(y, 0, idx);
  }
  return data::DataLoader(data::TensorDataset(x, y), {.batch_size = 4});
}

// The bytes of the tensors rank `s` of `stages` computes with (its V chunks), counted on an
// unreleased model of `layers` blocks; sharded over `shards` ranks (FSDP: each block a unit, the
// rest of the stage the root, each padded to `shards` equal shards), one rank's shard.
int64_t stage_bytes(const std::string& kind, int tp, const std::shared_ptr<ProcessGroup>& tp_group,
                    int s, int stages, int V, int layers, int shards = 1) {
  auto whole = make_model(kind, layers);
  if (tp > 1) parallelize_tensor(*whole, tp_group);
  std::set<const TensorImpl*> held;
  for (const auto& chunk : rank_chunks(*whole, s, stages, V))
    for (const Tensor& p : chunk->held()) held.insert(p.impl());
  std::map<std::string, int64_t> units;  // "h.0" / "layers.0" (a block), "" (the root)
  for (const auto& [name, p] : whole->named_parameters()) {
    if (!held.count(p.impl())) continue;
    const bool block = name.rfind("h.", 0) == 0 || name.rfind("layers.", 0) == 0;
    units[block ? name.substr(0, name.find('.', name.find('.') + 1)) : ""] += p.numel();
  }
  int64_t bytes = 0;
  for (const auto& [unit, n] : units) bytes += (n + shards - 1) / shards * int64_t(sizeof(double));
  return bytes;
}

// The largest difference of `got`'s entries from `want`'s of the same names that start with
// `prefix` (1e9 when one is missing).
double max_entry_difference(const nn::StateDict& got, const nn::StateDict& want,
                            const std::string& prefix) {
  double worst = 0;
  for (const auto& [name, t] : want) {
    if (name.rfind(prefix, 0) != 0) continue;
    const Tensor* g = nn::find(got, name);
    if (!g || g->shape() != t.shape()) return 1e9;
    worst = std::max(worst, max(abs(g->to(kF64) - t.to(kF64))).item());
  }
  return worst;
}

// The error reading a parameter of another stage gives (the last one naming a pipeline stage; under
// FSDP the stage's own are released too, naming their unit), "" without one.
std::string read_other_stage(const nn::Module& model) {
  std::string refused;
  for (const Tensor& p : model.parameters()) try {
      (void)p.data_ptr();
    } catch (const std::exception& e) {
      if (refused.empty() || std::string(e.what()).find("pipeline stage") != std::string::npos)
        refused = e.what();
    }
  return refused;
}

int model_mode(const std::string& kind, const std::map<std::string, std::string>& kv) {
  test::TestJob job = test::join_test_job();
  const int tp = key(kv, "tp", 1), dp = key(kv, "dp", 1), zero = key(kv, "zero", 0),
            pp = job.world / (tp * dp), V = key(kv, "virtual", 1), L = key(kv, "layers", 4);
  DeviceMesh mesh({{"pp", pp}, {"dp", dp}, {"tp", tp}});
  const int stage = mesh.coordinate("pp"), replica = mesh.coordinate("dp");
  const int64_t expected = stage_bytes(kind, tp, mesh.group("tp"), stage, pp, V, L);
  // FSDP: this rank's shard of the stage (Note [FSDP over a pipeline stage]).
  const int64_t expected_held =
      zero == 3 ? stage_bytes(kind, tp, mesh.group("tp"), stage, pp, V, L, dp) : expected;
  auto ref = make_model(kind, L), model = make_model(kind, L);
  const ParallelPlan plan{
      .zero = zero,
      .tp = tp,
      .sequence_parallel = kv.count("sp") > 0,
      .pp = pp,
      .pp_schedule = V > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB,
      .pp_virtual_stages = V};
  auto parallel = parallelize(model, plan, distributed::world(), [](nn::Module& m) {
    return std::make_unique<optim::AdamW>(m.parameters(), adamw());
  });
  optim::AdamW ref_opt(ref->parameters(), adamw());
  double norm_diff = 0;          // the gradients' norm before the clip, relative to one process's
  for (int s = 0; s < 3; ++s) {  // replica r on rows [r B / dp, (r + 1) B / dp)
    auto [x, y] = batch(s, replica * kBatch / dp, kBatch / dp);
    auto [rx, ry] = batch(s, 0, kBatch);
    parallel->optimizer().zero_grad(), ref_opt.zero_grad();
    parallel->forward_backward(x, y, 2);
    ref->loss(rx, ry).backward();
    const double norm = parallel->optimizer().clip_grad_norm_(0.5).item<double>();
    const double ref_norm = nn::clip_grad_norm_(ref->parameters(), 0.5).item<double>();
    norm_diff = std::max(norm_diff, std::abs(norm - ref_norm) / ref_norm);
    parallel->optimizer().step(), ref_opt.step();
  }
  const ParallelModel::Memory held = parallel->memory();
  const std::string refused = read_other_stage(*model);
  data::DataLoader mine = eval_windows(replica, dp), all = eval_windows(0, 1);
  train::Evaluation got = train::evaluate_classifier(*parallel, mine, *distributed::world(), kCPU);
  train::Evaluation want = train::evaluate_classifier(*ref, all, *distributed::world(), kCPU);
  const double eval_diff =
      std::max(std::abs(got.loss - want.loss), std::abs(got.accuracy - want.accuracy));
  nn::StateDict whole = parallel->model_state_dict(), state = parallel->optimizer_state_dict();
  double weight_diff = 0, state_diff = 0;
  if (stage == 0) {
    weight_diff = max_entry_difference(whole, ref->state_dict(), "");
    state_diff = max_entry_difference(state, ref_opt.state_dict(), "state.");
  }
  std::cout << "rank " << job.rank << " stage " << stage << " bytes " << held.parameters
            << " expected " << expected_held << " optimizer state " << held.optimizer_state
            << " eval loss " << got.loss << " diff " << eval_diff << " weight diff " << weight_diff
            << " optimizer state diff " << state_diff << " norm diff " << norm_diff
            << " refused: " << refused << "\n";
  const bool names_stage = refused.find("pipeline stage") != std::string::npos || pp == 1;
  // AdamW's two moments of the stage's parameters, 1 / dp of them under ZeRO (shards padded).
  const double state_share = double(held.optimizer_state) / double(2 * expected);
  const bool state_ok = std::abs(state_share - (zero > 0 ? 1.0 / dp : 1.0)) < 0.01;
  return held.parameters == expected_held && names_stage && state_ok && eval_diff < 1e-9 &&
                 weight_diff < 1e-7 && state_diff < 1e-7 && norm_diff < 1e-9
             ? 0
             : 1;
}

// Loss scaling over the stages (Note [Loss scaling over a pipeline] in
// distributed/pipeline/schedule.h): the step with a GradScaler at 1024 gives every stage's
// gradients exactly 1024 times the unscaled step's; then, with an inf planted in the first stage's
// gradients only, every stage's scaler skips the step (its parameters stay) and halves its scale.
int scaler_mode(const std::string& kind, const std::map<std::string, std::string>& kv) {
  test::TestJob job = test::join_test_job();
  const int V = key(kv, "virtual", 1);
  auto model = make_model(kind);
  const ParallelPlan plan{
      .pp = job.world,
      .pp_schedule = V > 1 ? PipelineSchedule::Interleaved : PipelineSchedule::OneFOneB,
      .pp_virtual_stages = V};
  auto parallel = parallelize(model, plan, distributed::world(), [](nn::Module& m) {
    return std::make_unique<optim::AdamW>(m.parameters(), adamw());
  });
  optim::Optimizer& opt = parallel->optimizer();
  auto [x, y] = batch(0, 0, kBatch);
  const std::vector<Tensor> params = opt.all_params();  // the stage's
  std::vector<Tensor> plain;
  parallel->forward_backward(x, y, 2);
  for (const Tensor& p : params) plain.push_back(clone(p.grad()));
  amp::GradScaler scaler({.init_scale = 1024.0});
  opt.zero_grad();
  parallel->forward_backward(x, y, 2, std::nullopt, &scaler);
  double scaled_diff = 0;
  std::vector<Tensor> before;
  for (size_t i = 0; i < plain.size(); ++i) {
    scaled_diff = std::max(scaled_diff, max(abs(params[i].grad() - plain[i] * 1024.0)).item());
    before.push_back(clone(params[i]));
  }
  if (job.rank == 0) params[0].grad().fill_(INFINITY);
  const bool stepped = scaler.step(opt);
  scaler.update();
  double moved = 0;
  for (size_t i = 0; i < before.size(); ++i)
    moved = std::max(moved, max(abs(params[i] - before[i])).item());
  std::cout << "rank " << job.rank << ": " << plain.size() << " gradients, scaled diff "
            << scaled_diff << ", stepped " << stepped << ", moved " << moved << ", scale "
            << scaler.get_scale() << "\n";
  return !plain.empty() && scaled_diff == 0 && !stepped && moved == 0 && scaler.get_scale() == 512.0
             ? 0
             : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 2 ? argv[1] : "";
  if ((mode != "train" || argc < 4) && mode != "model" && mode != "scaler") {
    std::cerr << "usage: pp_tool train <gpt|llama> <steps> [pp=N] [dp=N] [tp=N] [micro=M] [sp=1] "
                 "[schedule=gpipe|1f1b|interleaved] [virtual=V] [layers=L] [clip=X] "
                 "[grads=second|dp]\n"
                 "       pp_tool model <gpt|llama> [tp=N] [dp=N] [zero=1|2|3] [virtual=V] "
                 "[layers=L] [sp=1]\n       pp_tool scaler <gpt|llama> [virtual=V]\n";
    return 2;
  }
  try {
    if (mode == "model") return model_mode(argv[2], keys(argc, argv, 3));
    if (mode == "scaler") return scaler_mode(argv[2], keys(argc, argv, 3));
    return train_mode(argv[2], std::atoi(argv[3]), keys(argc, argv, 4));
  } catch (const std::exception& e) {
    std::cout << "error: " << e.what() << "\n";
    return 3;
  }
}
