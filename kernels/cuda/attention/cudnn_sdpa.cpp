// The cuDNN SDPA graphs of CUDA's flash attention (Note [Flash attention through cuDNN] in
// kernels/cuda/attention/cudnn_sdpa.h): building the forward and backward graphs with cuDNN's C++
// frontend, the per-thread cache of built graphs, and executing them on the current stream. Leaves
// out: argument checks and layouts (kernels/cuda/attention/cuda_attention.cpp does them),
// autotuning between engines (the heuristics' first choice runs), dropout.
#include "kernels/cuda/attention/cudnn_sdpa.h"

#include <cudnn_frontend.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/stream.h"
#include "core/env_flag.h"
#include "kernels/cuda/blas_handle.h"
#include "kernels/cuda/plan_key.h"

namespace loom::cuda {

namespace {

namespace fe = cudnn_frontend;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;

// The unique ids that bind the graphs' tensors to pointers at execution.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqQ, kSeqKV };

fe::DataType_t fe_dtype(DType t) {
  LOOM_CHECK(t == DType::F16 || t == DType::BF16, "cuDNN flash attention: dtype ", dtype_name(t),
             " is not float16 or bfloat16");
  return t == DType::F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
}

std::vector<int64_t> dims_of(const Tensor& t) {
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}
std::vector<int64_t> strides_of(const Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

// A graph input with t's sizes and strides (dtype: the graph's io type unless given).
TensorAttr input(fe::graph::Graph& g, const char* name, int64_t uid, const Tensor& t) {
  auto a = fe::graph::Tensor_attributes()
               .set_name(name)
               .set_uid(uid)
               .set_dim(dims_of(t))
               .set_stride(strides_of(t));
  if (t.dtype() == DType::F32) a.set_data_type(fe::DataType_t::FLOAT);
  if (t.dtype() == DType::I32) a.set_data_type(fe::DataType_t::INT32);
  return g.tensor(a);
}

// Marks a graph output as t: its uid, sizes and strides.
void output(const TensorAttr& a, int64_t uid, const Tensor& t) {
  a->set_output(true).set_uid(uid).set_dim(dims_of(t)).set_stride(strides_of(t));
  if (t.dtype() == DType::F32) a->set_data_type(fe::DataType_t::FLOAT);
}

// What the forward's and the backward's attributes share: the node's name, the scale, the causal
// mask (aligned top left) and, when t has key lengths, the padding mask's inputs
// (Note [Flash attention through cuDNN]).
template <typename Attributes>
void set_shared(fe::graph::Graph& g, const SdpaTensors& t, const char* name, bool causal,
                float scale, Attributes& opts) {
  opts.set_name(name).set_attn_scale(scale);
  if (causal)
    opts.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  if (!t.seq_kv.defined()) return;
  opts.set_padding_mask(true)
      .set_seq_len_q(input(g, "seq_q", kSeqQ, t.seq_q))
      .set_seq_len_kv(input(g, "seq_kv", kSeqKV, t.seq_kv));
}

std::shared_ptr<fe::graph::Graph> new_graph(DType dt) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_dtype(dt))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// out, stats = sdpa(q, k, v) with the stats kept for the backward.
std::shared_ptr<fe::graph::Graph> forward_graph(const SdpaTensors& t, bool causal, float scale) {
  auto g = new_graph(t.q.dtype());
  auto opts = fe::graph::SDPA_attributes().set_generate_stats(true);
  set_shared(*g, t, "loom_sdpa", causal, scale, opts);
  auto [o, stats] =
      g->sdpa(input(*g, "q", kQ, t.q), input(*g, "k", kK, t.k), input(*g, "v", kV, t.v), opts);
  output(o, kO, t.out);
  output(stats, kStats, t.stats);
  return g;
}

// dq, dk, dv = sdpa_backward(q, k, v, out, grad_out, stats).
std::shared_ptr<fe::graph::Graph> backward_graph(const SdpaTensors& t, bool causal, float scale,
                                                 bool deterministic) {
  auto g = new_graph(t.q.dtype());
  auto opts = fe::graph::SDPA_backward_attributes().set_deterministic_algorithm(deterministic);
  set_shared(*g, t, "loom_sdpa_backward", causal, scale, opts);
  auto [dq, dk, dv] =
      g->sdpa_backward(input(*g, "q", kQ, t.q), input(*g, "k", kK, t.k), input(*g, "v", kV, t.v),
                       input(*g, "o", kO, t.out), input(*g, "dO", kDO, t.grad_out),
                       input(*g, "stats", kStats, t.stats), opts);
  output(dq, kDQ, t.dq);
  output(dk, kDK, t.dk);
  output(dv, kDV, t.dv);
  return g;
}

// LOOM_SDPA_PLAN_LOG=1: each new key's graph and workspace are printed to stderr.
bool plan_log() {
  static const bool on = env_flag("LOOM_SDPA_PLAN_LOG");
  return on;
}

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;  // null: no engine took the key (why says so)
  int64_t workspace = 0;
  std::string why;
};

// Validates the graph, lowers it to cuDNN, asks heuristics A for engines and finalizes the first
// plan that supports it.
BuiltGraph build(std::shared_ptr<fe::graph::Graph> g, cudnnHandle_t h) {
  BuiltGraph b;
  try {
    fe::error_t st = g->build(h, {fe::HeurMode_t::A});
    if (st.is_good()) st = g->get_workspace_size(b.workspace);
    if (st.is_bad()) {
      b.why = st.get_message();
      return b;
    }
  } catch (const std::exception& e) {  // the frontend throws on a few failures (a missing library)
    b.why = e.what();
    return b;
  }
  b.graph = std::move(g);
  return b;
}

// Everything a graph depends on: direction (with the backward's algorithm), device, dtype, causal,
// the padding mask's presence, the scale's float bits, the sizes and the strides of every tensor
// but stats and the lengths (always contiguous).
using SdpaKey = PlanKeyOf<48>;

SdpaKey key_of(bool backward, bool deterministic, const SdpaTensors& t, bool causal, float scale) {
  SdpaKey k{};
  size_t i = 0;
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale, sizeof scale_bits);
  k[i++] = backward + 2 * deterministic;
  k[i++] = t.q.device().index;
  k[i++] = int64_t(t.q.dtype());
  k[i++] = causal + 2 * t.seq_kv.defined();
  k[i++] = scale_bits;
  for (int64_t s : {t.q.size(0), t.q.size(1), t.k.size(1), t.q.size(2), t.k.size(2), t.q.size(3)})
    k[i++] = s;
  std::vector<const Tensor*> ts{&t.q, &t.k, &t.v, &t.out};
  if (backward) ts.insert(ts.end(), {&t.grad_out, &t.dq, &t.dk, &t.dv});
  for (const Tensor* x : ts)
    for (int d = 0; d < 4; ++d) k[i++] = x->stride(d);
  return k;  // 11 + 4 * 8 = 43 entries used at most
}

using GraphCache = std::unordered_map<SdpaKey, BuiltGraph, PlanKeyHash>;
GraphCache& graph_cache() {
  thread_local auto* cache = new GraphCache();  // per thread, as the cuDNN handles; never freed
  return *cache;
}

std::string run(bool backward, const SdpaTensors& t, bool causal, double scale) {
  int dev = t.q.device().index;
  DeviceGuard guard(dev);
  cudnnHandle_t h = dnn_handle(dev);  // bound to the current stream
  auto s = float(scale);
  const bool deterministic = backward && sdpa_deterministic();
  SdpaKey key = key_of(backward, deterministic, t, causal, s);
  GraphCache& cache = graph_cache();
  auto it = cache.find(key);
  if (it == cache.end()) {
    auto g = backward ? backward_graph(t, causal, s, deterministic) : forward_graph(t, causal, s);
    it = cache.emplace(key, build(std::move(g), h)).first;
    if (plan_log())
      std::fprintf(stderr, "sdpa graph: %s%s q %s k %s v %s%s%s: %s, workspace %ld bytes\n",
                   backward ? "backward" : "forward", deterministic ? " (deterministic)" : "",
                   describe(t.q).c_str(), str(t.k.shape()).c_str(), str(t.v.shape()).c_str(),
                   causal ? " causal" : "", t.seq_kv.defined() ? " padded" : "",
                   it->second.graph ? "built" : it->second.why.c_str(), long(it->second.workspace));
  }
  const BuiltGraph& b = it->second;
  if (!b.graph) return b.why.empty() ? std::string("no engine") : b.why;

  std::unordered_map<int64_t, void*> pack{{kQ, t.q.data_ptr()},
                                          {kK, t.k.data_ptr()},
                                          {kV, t.v.data_ptr()},
                                          {kO, t.out.data_ptr()},
                                          {kStats, t.stats.data_ptr()}};
  if (t.seq_kv.defined()) {
    pack.emplace(kSeqQ, t.seq_q.data_ptr());
    pack.emplace(kSeqKV, t.seq_kv.data_ptr());
  }
  if (backward) {
    pack.emplace(kDO, t.grad_out.data_ptr());
    pack.emplace(kDQ, t.dq.data_ptr());
    pack.emplace(kDK, t.dk.data_ptr());
    pack.emplace(kDV, t.dv.data_ptr());
  }
  DataPtr ws;
  if (b.workspace > 0) ws = allocator_for(t.q.device()).allocate(size_t(b.workspace));
  fe::error_t st = b.graph->execute(h, pack, ws.get());
  LOOM_CHECK(st.is_good(), backward ? "sdpa_backward" : "sdpa_forward",
             ": cuDNN's flash attention failed to run for q ", describe(t.q), ", k ", t.k.shape(),
             ", v ", t.v.shape(), ": ", st.get_message());
  return {};
}

}  // namespace

std::string run_sdpa_forward(const SdpaTensors& t, bool causal, double scale) {
  return run(false, t, causal, scale);
}

std::string run_sdpa_backward(const SdpaTensors& t, bool causal, double scale) {
  return run(true, t, causal, scale);
}

size_t sdpa_graph_count() {
  size_t n = 0;
  for (const auto& [key, built] : graph_cache()) n += built.graph ? 1 : 0;
  return n;
}

}  // namespace loom::cuda
