// CudaGraphStep: a program's whole training step, captured once into a CUDA graph and replayed
// for every batch (--cuda-graph), or run as it is. It wraps the program's step function from
// outside, as tinygrad's TinyJit wraps its step: the step itself does not know. Leaves out:
// steps whose shapes change (the graph holds one shape) and steps that read values back to the
// host (a capture cannot).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "core/tensor.h"
#include "nn/optim/optimizer.h"

namespace loom::distributed {
class ParallelModel;
}

namespace loom::train {

// Note [The training step as a CUDA graph]
// With --cuda-graph the whole step (zero-grad, forward, loss, backward and the optimizer update,
// with a GradScaler also unscale, the inf check and the scale schedule) is captured once into a
// CUDA graph on static input buffers and replayed for every batch: one launch instead of
// hundreds, and no host synchronisation. The first step runs eagerly: it creates what a capture
// cannot (cuBLASLt plans, cuDNN algorithms and workspaces, the optimizer's state) and, under
// DDP, it is the first iteration, which records the order gradients arrive in. Before the second
// step the optimizer is made capturable (Note [Capturable optimizer] in nn/optim/optimizer.h):
// its learning rate and step count move to the device, where the fused kernels read and count
// them, so a replay updates correctly at every step and a learning-rate schedule still applies.
// Then the step is captured on static copies of the batch, and each call copies its batch in and
// replays. Gradients live in the graph's memory pool and are rewritten by each replay (the
// step's own zero_grad is captured with it). With mixed precision the captured forward runs
// under autocast and the backward starts from the scaled loss (its scale is read from the
// scaler's device tensor); the scaler's skip decision stays on the device (Note [GradScaler]).
// With gradient accumulation (Note [Gradient accumulation] in train/micro_batches.h) the graph
// holds all k micro-batches: the static buffers are the whole batch and the micro-batches are
// views of them. Under DistributedDataParallel over NCCL the graph also holds DDP's forward (rank
// 0's buffers) and the backward's bucket all-reduces, captured in bucket order, the same on
// every rank (Note [DDP and CUDA graphs] in distributed/ddp/ddp.cpp, Note [Reducer under graph
// capture]): the buckets are rebuilt in the first step's order before the capture
// (prepare_for_capture), and every .grad is a view of its bucket, zero-filled by the captured
// forward. Outside the graph: the consistency check (before a replay when one is due) and the
// loss read-back (the caller's); after each replay the process group watches it as one op (the
// collective timeout). Gloo is refused at the first step, with the reason (its collectives run
// on host threads), and so are find_unused_parameters and ZeRO.
class CudaGraphStep {
 public:
  // x: (N, ...), y: (N, ...) -> the step's loss, a scalar left on the device.
  using Step = std::function<Tensor(const Tensor& x, const Tensor& y)>;

  // graph = false calls `step` as it is. graph = true captures it after one eager call (an
  // error at the first call in a build without CUDA, when the inputs are not on a CUDA device,
  // or for a parallel model that cannot be captured: its check_capturable says why). `model` is
  // the model as parallelize spread it (null: one process, nothing to do around a replay);
  // `forwards` the training forwards one step runs (its micro-batches).
  CudaGraphStep(Step step, bool graph, optim::Optimizer& opt,
                distributed::ParallelModel* model = nullptr, int64_t forwards = 1);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  Tensor operator()(const Tensor& x, const Tensor& y);

  // The training forwards one step runs (--grad-accum's k); before the first step.
  void set_forwards(int64_t k);
  bool graphed() const { return use_graph_; }
  int64_t calls() const { return calls_; }  // steps taken: after the first, the options are fixed
  bool captured() const;

 private:
  Tensor replay(const Tensor& x, const Tensor& y);
  void capture(const Tensor& x, const Tensor& y);

  struct Graph;  // the captured step and its static buffers (CUDA builds only)
  std::unique_ptr<Graph> graph_;
  Step step_;
  bool use_graph_;
  optim::Optimizer& opt_;
  distributed::ParallelModel* model_;
  int64_t forwards_;
  int64_t calls_ = 0;
};

}  // namespace loom::train
