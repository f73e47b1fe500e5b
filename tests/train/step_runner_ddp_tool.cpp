// A worker test_step_runner_accum_ddp.cpp starts on N ranks over Gloo (RANK, WORLD_SIZE, ...
// set): `step_runner_ddp_tool <k> <steps> <out_dir>` trains the ddp_case problem in float64
// through train::StepRunner on a DistributedDataParallel with set_grad_accum(k), rank r on rows
// [8r, 8r + 8) of each global batch. Its process group counts the all-reduces DDP starts during
// the steps; prints "all_reduces N" and writes <out_dir>/final_rank<r>.safetensors. Exit 0 = ran.
// A fourth argument "graph" asks for the CUDA graph step (--cuda-graph), which Gloo refuses:
// the error goes to stderr and the exit status is 1.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include "distributed/ddp/ddp.h"
#include "distributed/ddp/ddp_case.h"
#include "distributed/env.h"
#include "distributed/parallel/data_parallel_model.h"
#include "distributed/world.h"
#include "nn/serialize.h"
#include "train/step_runner.h"

using namespace loom;
namespace dist = loom::distributed;
using dist::DistributedDataParallel;
using dist::OpRecord;
using dist::ProcessGroup;
using dist::Work;

namespace {

// The world group, with every all-reduce counted (the collectives themselves are the world's).
class CountingGroup : public ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(),
                     std::make_shared<dist::PrefixStore>("counting", inner->store()),
                     inner->timeout()),
        inner_(std::move(inner)) {}
  std::string backend() const override { return inner_->backend(); }
  int64_t all_reduces = 0;

 protected:
  std::shared_ptr<Work> do_all_reduce(Tensor& t, dist::ReduceOp op, const OpRecord&) override {
    ++all_reduces;
    return inner_->all_reduce(t, op);
  }
  std::shared_ptr<Work> do_broadcast(Tensor& t, int root, const OpRecord&) override {
    return inner_->broadcast(t, root);
  }
  std::shared_ptr<Work> do_all_gather(Tensor& out, const Tensor& in, const OpRecord&) override {
    return inner_->all_gather(out, in);
  }
  std::shared_ptr<Work> do_reduce_scatter(Tensor& out, const Tensor& in, dist::ReduceOp op,
                                          const OpRecord&) override {
    return inner_->reduce_scatter(out, in, op);
  }
  std::shared_ptr<Work> do_barrier(const OpRecord&) override { return inner_->barrier(); }
  std::shared_ptr<Work> do_send(const Tensor& t, int dst, int tag, const OpRecord&) override {
    return inner_->send(t, dst, tag);
  }
  std::shared_ptr<Work> do_recv(Tensor& t, int src, int tag, const OpRecord&) override {
    return inner_->recv(t, src, tag);
  }
  void check_device(const char*, const Tensor&) const override {}

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

int run(int64_t k, int steps, const std::string& dir, bool graph) {
  auto pg = std::make_shared<CountingGroup>(dist::world());
  const int rank = pg->rank(), world_size = pg->size();
  const int64_t local = 8;
  auto model = test::ddp_case_model(kF64, 100 + uint64_t(rank));  // DDP takes rank 0's
  auto ddp = std::make_shared<DistributedDataParallel>(model, pg);
  auto sgd = test::ddp_case_optimizer(*ddp);
  distributed::DDPModel parallel(ddp, *sgd);
  train::StepRunner runner(parallel, 0.0, graph);
  runner.set_grad_accum(k);
  pg->all_reduces = 0;  // the steps' all-reduces only
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = test::ddp_case_batch(s, world_size * local, kF64);
    runner.step(x.slice(0, rank * local, (rank + 1) * local),
                y.slice(0, rank * local, (rank + 1) * local));
  }
  std::cout << "all_reduces " << pg->all_reduces << std::endl;
  save_safetensors(dir + "/final_rank" + std::to_string(rank) + ".safetensors",
                   ddp->named_parameters());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool graph = argc == 5 && std::string(argv[4]) == "graph";
  if (argc != 4 && !graph) {
    std::cerr << "usage: step_runner_ddp_tool <k> <steps> <out_dir> [graph]\n";
    return 2;
  }
  try {
    dist::InitOptions io;
    io.backend = "gloo";
    io.timeout = std::chrono::seconds(60);
    dist::init_process_group(io);
    int rc = run(std::atoll(argv[1]), std::atoi(argv[2]), argv[3], graph);
    dist::destroy_process_group();
    return rc;
  } catch (const std::exception& e) {
    std::cerr << "step_runner_ddp_tool: " << e.what() << "\n";
    return 1;
  }
}
