// A worker the DDP tests start N times (RANK, WORLD_SIZE, ... set; backend from
// LOOM_TEST_BACKEND, tensors on cuda:LOCAL_RANK for nccl). Modes:
//   train <f32|f64> <steps> <out_dir> [micro=K] [cap=BYTES] [comm=bf16|f16]   the ddp_case problem
//   unused <0|1> <out_dir>     a model with parameters the forward skips (find_unused_parameters)
//   mismatch                   rank 1 builds a different model
//   consistency                rank 1 changes a weight behind DDP's back
//   join <out_dir>             rank r has 3 + 2r steps, inside DistributedDataParallel::join
//   scaler <out_dir>           fp16 autocast + GradScaler; rank 1's input holds an inf at step 2
//   buffers <0|1> <out_dir>    a BatchNorm model, each rank on its own data, broadcast_buffers
//   collectives                counts the collectives of no_sync and of the synchronised backward
// Writes <out_dir>/<what>_rank<r>.safetensors; exit 0 = ran, 3 = the expected error was thrown
// (its message on stderr), anything else = failure.
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "../test_job.h"
#include "autograd/amp/autocast.h"
#include "ddp_case.h"
#include "distributed/ddp/ddp.h"
#include "distributed/env.h"
#include "distributed/store/store.h"
#include "distributed/world.h"
#include "nn/amp/grad_scaler.h"
#include "nn/serialize.h"

using namespace loom;
using namespace loom::distributed;

namespace {
Device g_device;
int g_rank = 0, g_world = 1;

void save(const std::string& dir, const std::string& what, nn::Module& m) {
  save_safetensors(dir + "/" + what + "_rank" + std::to_string(g_rank) + ".safetensors",
                   m.named_parameters());
}

std::map<std::string, std::string> kv(int argc, char** argv, int from) {
  std::map<std::string, std::string> out;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    auto eq = a.find('=');
    if (eq != std::string::npos) out[a.substr(0, eq)] = a.substr(eq + 1);
  }
  return out;
}

// The ddp_case problem: rank r takes rows [r * local, (r + 1) * local) of each global batch; with
// micro = K its rows are K micro-batches, the first K - 1 under no_sync.
int train(int argc, char** argv) {
  DType dt = std::string(argv[2]) == "f64" ? kF64 : kF32;
  int steps = std::atoi(argv[3]);
  std::string dir = argv[4];
  auto o = kv(argc, argv, 5);
  int micro = o.count("micro") ? std::stoi(o["micro"]) : 1;
  DDPOptions opt;
  if (o.count("cap"))
    opt.reducer.first_bucket_cap_bytes = opt.reducer.bucket_cap_bytes = std::stoul(o["cap"]);
  if (o.count("comm")) opt.reducer.comm_dtype = o["comm"] == "bf16" ? kBF16 : kF16;
  const int64_t b = 4;                                            // rows per micro-batch per rank
  auto model = test::ddp_case_model(dt, 100 + uint64_t(g_rank));  // differs per rank on purpose
  model->to(g_device);
  DistributedDataParallel ddp(model, nullptr, opt);
  save(dir, "init", ddp);
  auto sgd = test::ddp_case_optimizer(ddp);
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, int64_t(g_world) * micro * b, dt);
    int64_t lo = int64_t(g_rank) * micro * b;
    sgd->zero_grad();
    for (int k = 0; k < micro; ++k) {
      Tensor xk = x.slice(0, lo + k * b, lo + (k + 1) * b).to(g_device);
      Tensor yk = y.slice(0, lo + k * b, lo + (k + 1) * b).to(g_device);
      if (k + 1 < micro) {
        auto guard = ddp.no_sync();
        (cross_entropy(ddp(xk), yk) * (1.0 / micro)).backward();
        if (s == 0 && k == 0) {  // this rank's own gradient: nothing was communicated
          NamedTensors g;
          for (auto& [n, p] : ddp.named_parameters()) g.emplace_back(n, p.grad());
          save_safetensors(dir + "/nosync_grad_rank" + std::to_string(g_rank) + ".safetensors", g);
        }
      } else {
        (cross_entropy(ddp(xk), yk) * (1.0 / micro)).backward();
      }
    }
    sgd->step();
  }
  save(dir, "final", ddp);
  std::cout << "buckets " << ddp.reducer().bucket_names().size() << " rebuilt "
            << ddp.reducer().buckets_rebuilt() << "\n";
  return 0;
}

// fc is used on every rank, `some` only on rank 1, `never` on no rank.
class Heads : public nn::Module {
 public:
  Heads() : nn::Module("Heads") {
    fc = register_module("fc", std::make_shared<nn::Linear>(test::kIn, test::kClasses));
    some = register_module("some", std::make_shared<nn::Linear>(test::kIn, test::kClasses));
    never = register_module("never", std::make_shared<nn::Linear>(test::kIn, test::kClasses));
  }
  Tensor forward(const Tensor& x) override {
    return use_some ? fc->forward(x) + some->forward(x) : fc->forward(x);
  }
  std::shared_ptr<nn::Linear> fc, some, never;
  bool use_some = false;
};

int unused(char** argv) {
  bool find = std::string(argv[2]) == "1";
  std::string dir = argv[3];
  manual_seed(7);
  auto model = std::make_shared<Heads>();
  model->use_some = find && g_rank == 1;
  model->to(g_device);
  DDPOptions opt;
  opt.reducer.find_unused_parameters = find;
  DistributedDataParallel ddp(model, nullptr, opt);
  auto sgd = test::ddp_case_optimizer(ddp);
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 4, kF32);
    sgd->zero_grad();
    try {
      cross_entropy(ddp(x.to(g_device)), y.to(g_device)).backward();
    } catch (const Error& e) {
      std::cerr << e.what() << "\n";
      return 3;
    }
    if (find && (model->never->weight.grad().defined() || !model->some->weight.grad().defined())) {
      std::cerr << "rank " << g_rank << ": 'never' must keep no gradient and 'some' must get one\n";
      return 1;
    }
    sgd->step();
  }
  save(dir, "unused", ddp);
  return 0;
}

int mismatch() {
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(test::kIn, g_rank == 1 ? 5 : 4));
  model->to(g_device);
  try {
    DistributedDataParallel ddp(model);
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 3;
  }
  return 0;
}

int consistency() {
  auto model = test::ddp_case_model(kF32, 5);
  model->to(g_device);
  DDPOptions opt;
  opt.check_consistency_every = 2;
  DistributedDataParallel ddp(model, nullptr, opt);
  auto sgd = test::ddp_case_optimizer(ddp);
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 4, kF32);
    sgd->zero_grad();
    try {
      cross_entropy(ddp(x.to(g_device)), y.to(g_device)).backward();
    } catch (const Error& e) {
      std::cerr << "step " << s << ": " << e.what() << "\n";
      return 3;
    }
    sgd->step();
    if (s == 0 && g_rank == 1) {
      NoGradGuard g;
      model->at<nn::Linear>(2)->bias.add_(scalar_tensor(1e-3).to(g_device));
    }
  }
  return 0;
}

int join(char** argv) {
  std::string dir = argv[2];
  auto model = test::ddp_case_model(kF32, 9);
  model->to(g_device);
  DistributedDataParallel ddp(model);
  auto sgd = test::ddp_case_optimizer(ddp);
  int steps = 3 + 2 * g_rank;
  ddp.join([&] {
    for (int s = 0; s < steps; ++s) {
      auto [x, y] = test::ddp_case_batch(s * 10 + g_rank, 4, kF32);
      sgd->zero_grad();
      cross_entropy(ddp(x.to(g_device)), y.to(g_device)).backward();
      sgd->step();
    }
    save(dir, "join_own", ddp);  // this rank's weights after its last step, before the others end
  });
  save(dir, "join", ddp);
  std::cout << "rank " << g_rank << " ran " << steps << " steps and joined\n";
  return 0;
}
// Prints "decisions <1 stepped / 0 skipped per step> scale <final scale>": every rank must print
// the same line, because the scaler unscales the already all-reduced gradients.
int scaler(char** argv) {
  std::string dir = argv[2];
  auto model = test::ddp_case_model(kF32, 11);
  model->to(g_device);
  DistributedDataParallel ddp(model);
  auto sgd = test::ddp_case_optimizer(ddp);
  amp::GradScaler gs({.init_scale = 1024.0, .growth_interval = 1000});
  std::string decisions;
  for (int s = 0; s < 5; ++s) {
    auto [x, y] = test::ddp_case_batch(s, 8, kF32);
    Tensor xr = x.slice(0, g_rank * 4, g_rank * 4 + 4).contiguous();
    if (s == 2 && g_rank == 1) xr.data<float>()[0] = std::numeric_limits<float>::infinity();
    sgd->zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kF16);
      loss =
          cross_entropy(ddp(xr.to(g_device)), y.slice(0, g_rank * 4, g_rank * 4 + 4).to(g_device));
    }
    gs.scale(loss).backward();
    decisions += gs.step(*sgd) ? "1" : "0";
    gs.update();
  }
  save(dir, "scaler", ddp);
  std::cout << "decisions " << decisions << " scale " << gs.get_scale() << "\n";
  return 0;
}

// Each training forward syncs rank 0's BatchNorm statistics (with broadcast_buffers), then
// updates them with this rank's own batch; the evaluation forward syncs them once more. Saves the
// parameters and buffers (bn_state) and the evaluation output (bn_eval).
int buffers(char** argv) {
  bool broadcast = std::string(argv[2]) == "1";
  std::string dir = argv[3];
  auto model = test::ddp_bn_model(20 + uint64_t(g_rank));  // rank 0's weights win
  model->to(g_device);
  DDPOptions opt;
  opt.broadcast_buffers = broadcast;
  DistributedDataParallel ddp(model, nullptr, opt);
  auto sgd = test::ddp_case_optimizer(ddp);
  for (int s = 0; s < 4; ++s) {
    auto [x, y] = test::ddp_bn_batch(s, g_rank);
    sgd->zero_grad();
    cross_entropy(ddp(x.to(g_device)), y.to(g_device)).backward();
    sgd->step();
  }
  ddp.train(false);
  NamedTensors state = ddp.named_parameters();
  NamedTensors eval;
  {
    NoGradGuard g;
    eval.emplace_back("out", ddp(test::ddp_bn_batch(0, -1).first.to(g_device)));
  }
  for (auto& nb : ddp.named_buffers()) state.push_back(nb);
  std::string suffix = "_rank" + std::to_string(g_rank) + ".safetensors";
  save_safetensors(dir + "/bn_state" + suffix, state);
  save_safetensors(dir + "/bn_eval" + suffix, eval);
  return 0;
}

// Passes every collective on to the world group and counts them, so a test sees which ones a
// DistributedDataParallel built on it makes. Its own store keys go under "counting/".
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(),
                     std::make_shared<PrefixStore>("counting", inner->store()), inner->timeout()),
        inner_(std::move(inner)) {}
  std::string backend() const override { return inner_->backend(); }
  int all_reduces = 0, others = 0;

 protected:
  std::shared_ptr<Work> do_all_reduce(Tensor& t, distributed::ReduceOp op,
                                      const OpRecord&) override {
    ++all_reduces;
    return inner_->all_reduce(t, op);
  }
  std::shared_ptr<Work> do_broadcast(Tensor& t, int root, const OpRecord&) override {
    ++others;
    return inner_->broadcast(t, root);
  }
  std::shared_ptr<Work> do_all_gather(Tensor& out, const Tensor& in, const OpRecord&) override {
    ++others;
    return inner_->all_gather(out, in);
  }
  std::shared_ptr<Work> do_reduce_scatter(Tensor& out, const Tensor& in, distributed::ReduceOp op,
                                          const OpRecord&) override {
    ++others;
    return inner_->reduce_scatter(out, in, op);
  }
  std::shared_ptr<Work> do_barrier(const OpRecord&) override {
    ++others;
    return inner_->barrier();
  }
  std::shared_ptr<Work> do_send(const Tensor& t, int dst, int tag, const OpRecord&) override {
    return inner_->send(t, dst, tag);
  }
  std::shared_ptr<Work> do_recv(Tensor& t, int src, int tag, const OpRecord&) override {
    return inner_->recv(t, src, tag);
  }
  void check_device(const char*, const Tensor&) const override {}  // the world group checks

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

// Two micro-batches under no_sync, then one synchronised: prints
// "no_sync: <all_reduces> all_reduces <others> other; synchronised: <all_reduces> all_reduces
// <others> other; buckets <n>".
int collectives() {
  auto pg = std::make_shared<CountingGroup>(world());
  auto model = test::ddp_case_model(kF32, 13);
  model->to(g_device);
  DDPOptions opt;
  opt.reducer.first_bucket_cap_bytes = opt.reducer.bucket_cap_bytes = 512;
  opt.reducer.rebuild_buckets = false;  // a rebuild would add its broadcast to the next forward
  DistributedDataParallel ddp(model, pg, opt);
  auto sgd = test::ddp_case_optimizer(ddp);
  auto batch = test::ddp_case_batch(0, 12, kF32);
  Tensor x = batch.first, y = batch.second;  // named: clang 14 cannot capture a binding
  auto micro = [&](int k) {
    Tensor xk = x.slice(0, k * 4, k * 4 + 4).to(g_device);
    Tensor yk = y.slice(0, k * 4, k * 4 + 4).to(g_device);
    (cross_entropy(ddp(xk), yk) * (1.0 / 3)).backward();
  };
  sgd->zero_grad();
  pg->all_reduces = pg->others = 0;  // construction broadcast the weights
  {
    auto guard = ddp.no_sync();
    micro(0);
    micro(1);
  }
  std::cout << "no_sync: " << pg->all_reduces << " all_reduces " << pg->others << " other; ";
  pg->all_reduces = pg->others = 0;
  micro(2);
  std::cout << "synchronised: " << pg->all_reduces << " all_reduces " << pg->others
            << " other; buckets " << ddp.reducer().bucket_names().size() << "\n";
  sgd->step();
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: ddp_tool "
                 "train|unused|mismatch|consistency|join|scaler|buffers|collectives ...\n";
    return 2;
  }
  try {
    const test::TestJob job = test::join_test_job();
    g_rank = job.rank, g_world = job.world, g_device = job.device;
    std::string mode = argv[1];
    int rc = 2;
    if (mode == "train")
      rc = train(argc, argv);
    else if (mode == "unused")
      rc = unused(argv);
    else if (mode == "mismatch")
      rc = mismatch();
    else if (mode == "consistency")
      rc = consistency();
    else if (mode == "join")
      rc = join(argv);
    else if (mode == "scaler")
      rc = scaler(argv);
    else if (mode == "buffers")
      rc = buffers(argv);
    else if (mode == "collectives")
      rc = collectives();
    else
      std::cerr << "ddp_tool: unknown mode " << mode << "\n";
    destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "ddp_tool: " << e.what() << "\n";
    return 1;
  }
}
