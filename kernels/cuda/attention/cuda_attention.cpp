// The CUDA backend's scaled dot-product attention (Backend::sdpa_forward and sdpa_backward, Note
// [Attention layout] in kernels/backend_methods.inc): the checks with errors that name the limit,
// the layouts cuDNN reads in place or the copies it needs, and the outputs; the graphs themselves
// are in kernels/cuda/attention/cudnn_sdpa.cpp (Note [Flash attention through cuDNN] in
// kernels/cuda/attention/cudnn_sdpa.h). k and v may have fewer heads than q (grouped-query
// attention): cuDNN reads them as they are and writes dk and dv with their heads; key lengths
// become cuDNN's padding mask. Leaves out:
// float32 and float64 (the attention op runs its composite there) and dropout. In a build without
// cuDNN's frontend headers both methods raise an error that says how to install them.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/env_flag.h"
#include "kernels/cuda/attention/cudnn_sdpa.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

namespace {

void check_fused(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& key_lengths) {
  check_sdpa_inputs(op, q, k, v);
  check_sdpa_key_lengths(op, q, key_lengths);
  std::string why = sdpa_fused_unsupported(q, k, v);
  LOOM_CHECK(why.empty(), op, " on CUDA: ", why, "; got q ", describe(q), ", k ", k.shape(), ", v ",
             v.shape(), " (the attention op runs its composite for such inputs)");
}

#ifdef LOOM_WITH_CUDNN_SDPA
// x itself when cuDNN can read it in place (Note [Flash attention through cuDNN]): the head dim
// contiguous, the other strides positive multiples of 8 elements (16 bytes in 16-bit types) and
// the data 16-byte aligned; else a contiguous copy.
Tensor readable(const Tensor& x) {
  bool ok = x.stride(3) == 1 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  for (int d = 0; d < 3; ++d) ok = ok && x.stride(d) > 0 && x.stride(d) % 8 == 0;
  return ok ? x : raw::contiguous(x);
}

// The padding mask's inputs from key lengths (B) (Note [Flash attention through cuDNN]):
// seq_kv the lengths as (B, 1, 1, 1) int32, seq_q Tq for every row. Nothing without lengths.
void set_key_lengths(SdpaTensors& t, const Tensor& key_lengths) {
  if (!key_lengths.defined()) return;
  const int64_t B = t.q.size(0), Tq = t.q.size(2);
  Tensor lengths = raw::contiguous(raw::cast(key_lengths, DType::I32));  // (B)
  t.seq_kv = make_view(lengths, {B, 1, 1, 1}, {1, 1, 1, 1}, 0);
  t.seq_q = empty({B, 1, 1, 1}, {.dtype = DType::I32, .device = t.q.device()});
  t.seq_q.fill_(double(Tq));
}

// Runs one direction with the tensors as given; if no engine takes their layouts, once more with
// contiguous copies of the inputs (the outputs are always in the layout loom allocates).
template <typename Run>
void run_or_retry_contiguous(const char* op, SdpaTensors t, bool causal, double scale, Run run) {
  std::string why = run(t, causal, scale);
  if (why.empty()) return;
  for (Tensor* x : {&t.q, &t.k, &t.v, &t.grad_out})
    if (x->defined()) *x = raw::contiguous(*x);
  std::string again = run(t, causal, scale);
  LOOM_CHECK(again.empty(), op, ": cuDNN has no flash-attention engine for q ", describe(t.q),
             ", k ", t.k.shape(), ", v ", t.v.shape(), (causal ? ", causal" : ""), ", scale ",
             scale, ": ", again);
}
#endif

}  // namespace

#ifndef LOOM_WITH_CUDNN_SDPA
size_t sdpa_graph_count() { return 0; }  // no graphs without the frontend (cudnn_sdpa.cpp)
#endif

namespace {
// Note [Deterministic attention backward] (kernels/cuda/attention/cudnn_sdpa.h): off unless the
// environment says LOOM_SDPA_DETERMINISTIC=1.
std::atomic<bool>& deterministic_flag() {
  static std::atomic<bool> flag{env_flag("LOOM_SDPA_DETERMINISTIC")};
  return flag;
}
}  // namespace
void set_sdpa_deterministic(bool on) { deterministic_flag().store(on); }
bool sdpa_deterministic() { return deterministic_flag().load(std::memory_order_relaxed); }

TensorPair CudaBackend::sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                     double scale, const Tensor& key_lengths) {
  check_fused("sdpa_forward", q, k, v, key_lengths);
#ifdef LOOM_WITH_CUDNN_SDPA
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  Tensor out = empty_attention_layout(B, H, Tq, D, {.dtype = q.dtype(), .device = q.device()});
  Tensor stats = empty({B, H, Tq, 1}, {.dtype = DType::F32, .device = q.device()});
  if (out.numel() == 0) return {out, stats};
  LOOM_CHECK(Tk > 0, "sdpa_forward: k ", k.shape(), " has no keys to attend to");
  SdpaTensors t{readable(q), readable(k), readable(v), out, stats, {}, {}, {}, {}, {}, {}};
  set_key_lengths(t, key_lengths);
  run_or_retry_contiguous("sdpa_forward", t, causal, scale, run_sdpa_forward);
  return {out, stats};
#else
  (void)causal, (void)scale, (void)key_lengths;
  LOOM_FAIL("sdpa_forward on CUDA: ", sdpa_fused_unsupported(q, k, v));
#endif
}

SdpaGrads CudaBackend::sdpa_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& stats,
                                     bool causal, double scale, const SdpaGrads& into,
                                     const Tensor& key_lengths) {
  check_fused("sdpa_backward", q, k, v, key_lengths);
  check_sdpa_into("sdpa_backward", into, q, k, v);
#ifdef LOOM_WITH_CUDNN_SDPA
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1);  // grouped-query heads: dk and dv have k's
  const Shape out_shape{B, H, Tq, D}, stats_shape{B, H, Tq, 1};
  LOOM_CHECK(grad_out.shape() == out_shape && out.shape() == out_shape &&
                 grad_out.dtype() == q.dtype() && out.dtype() == q.dtype() &&
                 grad_out.device() == q.device() && out.device() == q.device(),
             "sdpa_backward: grad_out ", describe(grad_out), " and out ", describe(out),
             " must be (B, H, Tq, D) = ", out_shape, " like q ", describe(q));
  LOOM_CHECK(stats.shape() == stats_shape && stats.device() == q.device(), "sdpa_backward: stats ",
             describe(stats), " must be (B, H, Tq, 1) = ", stats_shape, " on ", q.device());
  Options opt{.dtype = q.dtype(), .device = q.device()};
  SdpaGrads g = into.dq.defined() ? into
                                  : SdpaGrads{empty_attention_layout(B, H, Tq, D, opt),
                                              empty_attention_layout(B, Hkv, Tk, D, opt),
                                              empty_attention_layout(B, Hkv, Tk, D, opt)};
  if (g.dq.numel() == 0 || Tk == 0) {  // no queries: nothing reached k and v
    fill_(g.dk, 0.0);
    fill_(g.dv, 0.0);
    return g;
  }
  SdpaTensors t{readable(q),
                readable(k),
                readable(v),
                readable(out),
                raw::contiguous(raw::cast(stats, DType::F32)),
                readable(grad_out),
                g.dq,
                g.dk,
                g.dv,
                {},
                {}};
  set_key_lengths(t, key_lengths);
  run_or_retry_contiguous("sdpa_backward", t, causal, scale, run_sdpa_backward);
  return g;
#else
  (void)grad_out, (void)out, (void)stats, (void)causal, (void)scale, (void)into, (void)key_lengths;
  LOOM_FAIL("sdpa_backward on CUDA: ", sdpa_fused_unsupported(q, k, v));
#endif
}

}  // namespace loom::cuda
