// The memory plan (distributed/memory_plan.h, Note [Memory plan]): parameters per stage and rank,
// the bytes of each kind, the layouts of a GPU count and the printed table.
#include "distributed/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace loom::distributed {

namespace {

// One block's parameters: split over tp (the attention's and the MLP's matrices) and whole.
struct BlockParams {
  int64_t split = 0, whole = 0;
};

BlockParams block_params(const ModelShape& m) {
  const int64_t C = m.hidden, kv = m.kv_heads * (C / m.heads), F = m.ffn;
  BlockParams b;
  b.split = C * (C + 2 * kv) + C * C + (m.swiglu ? 3 : 2) * C * F;
  if (m.bias) b.split += (C + 2 * kv) + F;                // column-parallel biases are split
  b.whole = (m.bias ? 4 : 2) * C + (m.bias ? 2 * C : 0);  // two norms; row-parallel biases
  return b;
}

void check_layout(const ModelShape& m, const Layout& l) {
  const int64_t kv = m.kv_heads;
  LOOM_CHECK(l.tp >= 1 && m.heads % l.tp == 0 && kv % l.tp == 0 && m.ffn % l.tp == 0,
             "memory plan (", m.name, "): tp ", l.tp, " does not divide the ", m.heads,
             " heads, the ", kv, " key/value heads and the MLP's ", m.ffn);
  LOOM_CHECK(l.pp >= 1 && m.layers % l.pp == 0, "memory plan (", m.name, "): pp ", l.pp,
             " does not divide the ", m.layers, " layers");
  LOOM_CHECK(l.dp >= 1 && l.zero >= 0 && l.zero <= 3, "memory plan: dp ", l.dp, " zero ", l.zero);
}

// Parameters on the fullest stage's rank (before ZeRO-3).
int64_t stage_parameters(const ModelShape& m, const Layout& l) {
  const BlockParams b = block_params(m);
  const int64_t blocks = (m.layers / l.pp) * (b.split / l.tp + b.whole);
  const int64_t embed = m.vocab * m.hidden + m.positions * m.hidden;
  const int64_t final_norm = (m.bias ? 2 : 1) * m.hidden;
  const bool head_on_last = !m.tied || l.pp > 1;
  const int64_t first = blocks + embed + (l.pp == 1 ? final_norm : 0);
  const int64_t last =
      blocks + (l.pp > 1 ? final_norm : 0) + (head_on_last ? m.vocab * m.hidden : 0);
  return l.pp == 1 ? first + (head_on_last ? m.vocab * m.hidden : 0) : std::max(first, last);
}

// Bytes of one block's activations per token (bf16; Note [Memory plan]).
double block_activation_bytes(const ModelShape& m, int tp) {
  const double C = double(m.hidden), kv = double(m.kv_heads * (m.hidden / m.heads));
  const double mlp = m.swiglu ? 6.0 * double(m.ffn) : 4.0 * double(m.ffn);
  return 8.0 * C + (2.0 * (C + 2.0 * kv) + 2.0 * C + mlp) / double(tp);
}

}  // namespace

ModelShape model_shape(const nn::LlamaConfig& c, std::string name) {
  return {.name = std::move(name),
          .layers = c.n_layers,
          .hidden = c.dim,
          .heads = c.n_heads,
          .kv_heads = c.n_kv_heads,
          .ffn = c.ffn_hidden,
          .vocab = c.vocab_size,
          .positions = 0,
          .swiglu = true,
          .bias = false,
          .tied = c.tie_embeddings};
}

ModelShape model_shape(const nn::GPTConfig& c, std::string name) {
  return {.name = std::move(name),
          .layers = c.n_layer,
          .hidden = c.n_embd,
          .heads = c.n_head,
          .kv_heads = c.n_head,
          .ffn = 4 * c.n_embd,
          .vocab = c.vocab_size,
          .positions = c.block_size,
          .swiglu = false,
          .bias = c.bias,
          .tied = true};
}

RankMemory plan_memory(const ModelShape& m, const Layout& l) {
  check_layout(m, l);
  RankMemory r;
  const int64_t p = stage_parameters(m, l);
  const double dp = double(l.dp);
  r.parameters = l.zero >= 3 ? (p + l.dp - 1) / l.dp : p;
  r.parameter_bytes = 4.0 * double(r.parameters);
  r.gradient_bytes = 4.0 * double(p) / (l.zero >= 2 ? dp : 1.0);
  r.optimizer_bytes = 8.0 * double(p) / (l.zero >= 1 ? dp : 1.0);
  const double tokens = double(l.micro_batch * l.seq);
  const double per_block = block_activation_bytes(m, l.tp) * tokens;
  const double blocks_in_flight = double(m.layers / l.pp) * double(l.pp);  // 1F1B's first stage
  r.activation_bytes = l.checkpointing
                           ? blocks_in_flight * 2.0 * double(m.hidden) * tokens + per_block
                           : blocks_in_flight * per_block;
  return r;
}

std::vector<Layout> layouts_for(const ModelShape& m, int gpus, int64_t micro_batch, int64_t seq,
                                bool checkpointing) {
  std::vector<Layout> out;
  for (int tp = 1; tp <= gpus; tp *= 2)
    for (int pp = 1; tp * pp <= gpus; pp *= 2) {
      if (gpus % (tp * pp) != 0 || m.heads % tp || m.kv_heads % tp || m.ffn % tp || m.layers % pp)
        continue;
      const int dp = gpus / (tp * pp);
      // The sharded kind each layout runs: FSDP (3), a pipeline of tensor-parallel stages too
      // (each stage's tp shares sharded over its dp copies).
      for (int zero : dp > 1 ? std::vector<int>{0, 3} : std::vector<int>{0})
        out.push_back({dp, tp, pp, zero, micro_batch, seq, checkpointing});
    }
  return out;
}

std::string memory_table(const ModelShape& m, const std::vector<int>& gpu_counts,
                         int64_t micro_batch, int64_t seq, bool checkpointing, double device_gib) {
  std::ostringstream os;
  const double gib = double(1 << 30);
  char line[200];
  std::snprintf(line, sizeof line,
                "%s: memory per rank (GiB), AdamW, bf16 autocast, micro-batch %ld x T %ld%s\n",
                m.name.c_str(), long(micro_batch), long(seq),
                checkpointing ? ", activation checkpointing" : "");
  os << line
     << "gpus  dp  tp  pp  zero  parameters/rank  params  grads  optimizer  activations"
        "   total  fits "
     << device_gib << " GiB\n";
  for (int g : gpu_counts)
    for (const Layout& l : layouts_for(m, g, micro_batch, seq, checkpointing)) {
      const RankMemory r = plan_memory(m, l);
      std::snprintf(line, sizeof line,
                    "%4d %3d %3d %3d %5d %16ld %7.1f %6.1f %10.1f %12.1f %7.1f  %s\n", g, l.dp,
                    l.tp, l.pp, l.zero, long(r.parameters), r.parameter_bytes / gib,
                    r.gradient_bytes / gib, r.optimizer_bytes / gib, r.activation_bytes / gib,
                    r.total() / gib, r.total() / gib <= device_gib ? "yes" : "no");
      os << line;
    }
  return os.str();
}

}  // namespace loom::distributed
