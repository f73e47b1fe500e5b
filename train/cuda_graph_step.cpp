// The training step as a replayed CUDA graph (train/cuda_graph_step.h). The only file of train/
// that knows whether loom was built with CUDA.
#include "train/cuda_graph_step.h"

#include <utility>

#include "autograd/grad_mode.h"
#include "distributed/parallel/parallel_model.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#endif

namespace loom::train {

struct CudaGraphStep::Graph {
#ifdef LOOM_WITH_CUDA
  cuda::CudaGraph graph;
#endif
  Tensor static_x, static_y, static_loss;
};

CudaGraphStep::CudaGraphStep(Step step, bool graph, optim::Optimizer& opt,
                             distributed::ParallelModel* model, int64_t forwards)
    : graph_(std::make_unique<Graph>()),
      step_(std::move(step)),
      use_graph_(graph),
      opt_(opt),
      model_(model),
      forwards_(forwards) {}

CudaGraphStep::~CudaGraphStep() = default;

void CudaGraphStep::set_forwards(int64_t k) {
  LOOM_CHECK(calls_ == 0, "CudaGraphStep::set_forwards: the first step has run");
  forwards_ = k;
}

bool CudaGraphStep::captured() const { return graph_->static_loss.defined(); }

Tensor CudaGraphStep::operator()(const Tensor& x, const Tensor& y) {
  ++calls_;
  if (!use_graph_) return step_(x, y);
  if (calls_ > 1) return replay(x, y);
  // Before anything runs: what cannot be captured is refused by name.
  if (model_) model_->check_capturable("--cuda-graph");
#ifdef LOOM_WITH_CUDA
  LOOM_CHECK(x.device().is_cuda(), "--cuda-graph: the step's inputs are on ", x.device(),
             "; a CUDA graph needs a CUDA device");
  return step_(x, y);  // the eager first step (Note [The training step as a CUDA graph])
#else
  LOOM_FAIL("--cuda-graph: this build of loom has no CUDA support");
#endif
}

Tensor CudaGraphStep::replay(const Tensor& x, const Tensor& y) {
#ifdef LOOM_WITH_CUDA
  if (!captured()) capture(x, y);
  {
    NoGradGuard g;
    graph_->static_x.copy_(x);
    graph_->static_y.copy_(y);
  }
  if (model_) model_->before_replay(forwards_);  // DDP's consistency check, outside the graph
  graph_->graph.replay();                        // the whole step, optimizer included
  if (model_) model_->after_replay();            // the collective timeout holds
  return graph_->static_loss;
#else
  (void)x;
  (void)y;
  LOOM_FAIL("--cuda-graph: this build of loom has no CUDA support");
#endif
}

void CudaGraphStep::capture(const Tensor& x, const Tensor& y) {
#ifdef LOOM_WITH_CUDA
  Graph& g = *graph_;
  g.static_x = x.clone().detach();
  g.static_y = y.clone().detach();
  if (model_) model_->prepare_for_capture();  // DDP's bucket rebuild now, not in the graph
  opt_.make_capturable();                     // lr and step count on the device (state exists)
  opt_.zero_grad();                           // the captured backward assigns fresh gradients
  g.graph.capture_begin();
  g.static_loss = step_(g.static_x, g.static_y);  // all k micro-batches (views) and the update
  g.graph.capture_end();
#else
  (void)x;
  (void)opt_;  // used by the capture only
  (void)y;
#endif
}

}  // namespace loom::train
