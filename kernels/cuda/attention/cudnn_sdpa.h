// CUDA flash attention through cuDNN's SDPA graph (forward and backward), built with cuDNN's C++
// frontend: what kernels/cuda/attention/cuda_attention.cpp calls once it has checked and laid out
// the tensors. cudnn_sdpa.cpp is compiled only when CMake found the frontend's headers
// (LOOM_WITH_CUDNN_SDPA); without them sdpa_graph_count() is 0 and nothing else is called.
// Leaves out: dropout, attention bias, masks other than causal and padding, Dv != D.
#pragma once

#include <cstddef>
#include <string>

#include "core/tensor.h"

namespace loom::cuda {

// Note [Flash attention through cuDNN]
// Backend::sdpa_forward and sdpa_backward on CUDA (Note [Attention layout] in
// kernels/backend_methods.inc) run cuDNN's fused scaled dot-product attention, the engine llm.c and
// PyTorch use: the forward keeps each row's logsumexp (stats, float32) and the backward recomputes
// the softmax from it block by block, so memory grows with T, never with T x T. Both graphs compute
// in float32 (matmul accumulation and softmax) on float16 or bfloat16 tensors with 8 <= D = Dv <=
// 128 and D % 8 == 0; causal is cuDNN's top-left diagonal band (key j <= query i); the scale is a
// constant of the graph. The backward's algorithm: Note [Deterministic attention backward].
//
// Building a graph (operation graph, heuristics, plan; runtime-compiled kernels on first use)
// takes milliseconds to seconds, so each key (device, direction, dtype, causal, scale, sizes and
// the strides of every tensor) builds once and is kept, per thread, like the convolution plans
// (Note [cuDNN plan cache] in kernels/cuda/conv/cudnn_conv_graph.cpp); later calls only execute, on
// the current stream, with the workspace taken from loom's caching allocator for the call.
//
// cuDNN reads q, k, v and grad_out through their strides: the views of one (B, T, 3, H, D) qkv
// buffer a GPT makes (strides (3*H*D*T, D, 3*H*D, 1)) go in without copies. A tensor it cannot read
// in place (head dim not contiguous, strides not multiples of 8 elements, data not 16-byte aligned)
// is copied contiguous first, and a key no engine takes is remembered and retried once with
// contiguous copies of every input before it is reported as an error.
// k and v may have Hkv heads dividing q's H (grouped-query attention, Note [Grouped-query
// attention] in autograd/ops/attention.cpp): cuDNN's SDPA graphs take the head counts from the
// tensors' dims, and its backward sums dk and dv over each group of query heads itself.
// Key lengths (Note [Key lengths] in autograd/ops/attention.cpp) are cuDNN's padding mask: the
// graph takes seq_len_q and seq_len_kv, (B, 1, 1, 1) int32 each; seq_len_q is Tq for every row
// (every query keeps its output, as the composite's do) and seq_len_kv the row's key lengths. A
// graph with the mask is its own key; the lengths' values are read at execution, so one graph
// serves every batch of that shape (and a CUDA graph's replays, with the lengths updated in place).
struct SdpaTensors {
  Tensor q, k, v;        // (B, H, Tq, D), (B, Hkv, Tk, D), (B, Hkv, Tk, D)
  Tensor out, stats;     // (B, H, Tq, D), (B, H, Tq, 1) float32 contiguous
  Tensor grad_out;       // backward only: (B, H, Tq, D)
  Tensor dq, dk, dv;     // backward only: q's, k's and v's shapes
  Tensor seq_q, seq_kv;  // the padding mask: (B, 1, 1, 1) int32 contiguous each, or undefined
};

// Runs the forward graph, writing t.out and t.stats, or the backward graph, writing t.dq, t.dk and
// t.dv. Returns empty on success, else why no cuDNN engine takes these shapes and layouts (nothing
// was written; the reason is cached with the key).
std::string run_sdpa_forward(const SdpaTensors& t, bool causal, double scale);
std::string run_sdpa_backward(const SdpaTensors& t, bool causal, double scale);

// How many graphs this thread has built and kept (tests check that a repeated call builds none).
size_t sdpa_graph_count();

// Note [Deterministic attention backward]
// cuDNN's default backward adds each key block's share of dQ into a float32 accumulator with
// atomics, so dq may differ in its last bits from run to run; its workspace is that accumulator,
// O(B H T D). The deterministic algorithm (what llm.c runs) keeps one partial dQ per key block
// instead and sums them in a fixed order: the same bits every run, but a workspace of about
// B H Tq D * 4 bytes * Tk / 128, which grows with T x T. Measured on an H200 (bf16, causal, D = 64,
// forward + backward, beyond the inputs): B 16, H 12, T 1024 (GPT-2 124M's shape) 146 MiB and
// 0.30 ms per backward by default against 482 MiB and 0.32 ms deterministic; B 2, H 4, T 4096 24
// against 272 MiB. So the default is cuDNN's default, whose memory grows with T only, and
// LOOM_SDPA_DETERMINISTIC=1 in the environment (read once) or set_sdpa_deterministic(true) asks for
// bit-reproducible gradients at that memory cost.
void set_sdpa_deterministic(bool on);
bool sdpa_deterministic();

}  // namespace loom::cuda
