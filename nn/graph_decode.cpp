// GraphDecoder (nn/graph_decode.h): the eager prefill, the one-token step through the static
// cache, and the step's capture and replay as a CUDA graph. The only file of nn/ that knows
// whether loom was built with CUDA.
// Leaves out: updating a graph in place (each decoder captures its own, once) and graphs of
// several steps.
#include "nn/graph_decode.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#include "core/cuda/stream.h"
#endif

namespace loom::nn {

// Note [Graph decode]
// At batch 1 a small model's decode is launch-bound: each token runs every block's kernels one
// launch at a time, and the GPU idles between them. A CUDA graph replays the recorded kernels
// with one launch. What the step needs for that, and where it comes from:
// - the same shapes and addresses every step: the StaticKVCache (Note [Static KV cache] in
//   nn/transformer.h); the input token_ (1, 1), set before each step by a fill kernel (no host
//   copy); the outputs logits_ (V) and next_ (1), from the graph's private pool;
// - no host value that changes per step: the position is the cache's device tensor, advanced by
//   the step itself (its position += 1 is in the graph); the host counts length alongside and
//   checks length < max_len before each replay, which checks nothing itself;
// - nothing that waits on the host: the greedy argmax stays on the device; the host reads next_
//   (or logits_, to sample) after the replay;
// - everything that allocates or plans once, done before the capture: the prefill and the first
//   step run eagerly (the rotary table of every position, the cache's buffers, the matmuls'
//   plans, the allocator's blocks), as the training step's first step does
//   (train/cuda_graph_step.h).
// The capture runs the step's host code once without its kernels: begin's checks and advance's
// length += 1 (undone after it: the captured position += 1 runs at each replay). Steps: prefill
// (eager), step 1 (eager), step 2 (capture, then replay), step 3 on (replay). The eager decoder
// (the CPU, or cuda_graph false) calls run_step each time: the same ops in the same order, so
// the graphed tokens are the eager ones (tests/nn/test_cuda_graph_decode.cpp). Per token the host
// then launches a fill and the graph and reads 8 bytes back (greedy), or V logits (sampling).
// A prefill after the capture (the decoder reused for a new prompt) runs eagerly and replaces
// logits_ and next_; each replay hands back the graph's own (Graph::logits, next). The graph
// reads memory it does not own: the model's weights (moving or reloading them invalidates it)
// and the rotary table loom keeps per rope configuration (autograd/ops/rope.cpp), which a later
// rope call needing more positions of the same configuration would rebuild (a second model
// with a longer max_seq_len): keep one such model per process while a graphed decoder lives.

struct GraphDecoder::Graph {
#ifdef LOOM_WITH_CUDA
  cuda::CudaGraph graph;
#endif
  Tensor logits, next;  // the captured step's outputs, which every replay overwrites
};

GraphDecoder::GraphDecoder(CausalLM& model, int64_t max_len, bool cuda_graph)
    : model_(model), cuda_graph_(cuda_graph), cache_(max_len), graph_(std::make_unique<Graph>()) {
  LOOM_CHECK(max_len >= 1 && max_len <= model.max_context(), "GraphDecoder: max_len ", max_len,
             " is not in [1, ", model.max_context(), "] (the model's context)");
  LOOM_CHECK(!model.is_training(),
             "GraphDecoder: the model is in training mode (dropout would be captured); call "
             "eval() first");
  token_ = zeros({1, 1}, {.dtype = kI64, .device = model.device()});
}

GraphDecoder::~GraphDecoder() = default;

bool GraphDecoder::graphed() const {
#ifdef LOOM_WITH_CUDA
  return graph_->graph.ready();
#else
  return false;
#endif
}

Tensor GraphDecoder::prefill(const std::vector<int64_t>& prompt) {
  const int64_t T = int64_t(prompt.size());
  LOOM_CHECK(T >= 1 && T <= cache_.max_len, "GraphDecoder: the prompt has ", T,
             " tokens; the cache holds 1 to ", cache_.max_len);
  NoGradGuard no_grad;
  cache_.reset();
  Tensor ids = empty({1, T}, {.dtype = kI64});
  std::copy(prompt.begin(), prompt.end(), ids.data<int64_t>());
  Tensor logits = model_.forward(to(ids, model_.device()), cache_);  // (1, T, V)
  logits_ = select(select(logits, 0, 0), 0, T - 1);                  // (V)
  next_ = argmax(logits_, 0, /*keepdim=*/true);                      // (1)
  return logits_;
}

void GraphDecoder::run_step() {
  Tensor logits = model_.forward(token_, cache_);  // (1, 1, V)
  logits_ = select(select(logits, 0, 0), 0, 0);    // (V)
  next_ = argmax(logits_, 0, /*keepdim=*/true);    // (1)
}

Tensor GraphDecoder::step(int64_t token) {
  LOOM_CHECK(cache_.length >= 1, "GraphDecoder::step: no prompt yet (prefill first)");
  LOOM_CHECK(cache_.length < cache_.max_len, "GraphDecoder: the cache's ", cache_.max_len,
             " positions are full (", cache_.length, " written)");
  NoGradGuard no_grad;
  token_.fill_(double(token));  // exact: ids are far below 2^53
  ++steps_;
  const bool graph = cuda_graph_ && model_.device().is_cuda();
  if (!graph || steps_ == 1) {
    run_step();  // eager; graphed, the first step builds what the capture needs
    return logits_;
  }
#ifdef LOOM_WITH_CUDA
  cuda::DeviceGuard device(model_.device().index);
  if (!graphed()) capture();
  graph_->graph.replay();
  cache_.length += 1;  // the replay's position += 1, counted on the host
  logits_ = graph_->logits, next_ = graph_->next;  // a prefill since the capture replaced them
  return logits_;
#else
  LOOM_FAIL("GraphDecoder: a CUDA device in a build of loom without CUDA");
#endif
}

void GraphDecoder::capture() {
#ifdef LOOM_WITH_CUDA
  const int64_t length = cache_.length;
  graph_->graph.capture_begin();
  run_step();  // recorded, not run: logits_ and next_ now live in the graph's pool
  graph_->graph.capture_end();
  cache_.length = length;  // advance's host count ran, its kernel did not
  graph_->logits = logits_, graph_->next = next_;
#endif
}

int64_t GraphDecoder::greedy_token() const {
  LOOM_CHECK(next_.defined(), "GraphDecoder::greedy_token: nothing decoded yet (prefill first)");
  return next_.item<int64_t>();
}

}  // namespace loom::nn
