// The memory plan of a layout: the bytes one rank holds for a decoder-only language model (GPT-2,
// Llama) trained with AdamW under bf16 autocast, for each way of spreading it (data parallel with
// ZeRO stage 0-3, tensor parallel, pipeline parallel), computed from the sizes alone, without
// allocating: what train_gpt --plan-only prints. Leaves out: the allocator's fragmentation and
// workspaces, temporaries of single ops, the communication buffers (a few hundred MB).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::distributed {

// What the plan needs to know of the model.
struct ModelShape {
  std::string name;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int64_t positions = 0;  // a learned position table's rows (GPT-2), 0 for rotary (Llama)
  bool swiglu = false;    // MLP: down(silu(gate) up) (three F x C matrices) or GELU (two)
  bool bias = false;      // in the Linears and the norms (GPT-2)
  bool tied = true;       // the head is the embedding's matrix
};

// The shapes of loom's two decoder models.
ModelShape model_shape(const nn::LlamaConfig& c, std::string name = "Llama");
ModelShape model_shape(const nn::GPTConfig& c, std::string name = "GPT-2");

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int zero = 0;  // 0: DDP; 1: optimizer state sharded over dp; 2: and gradients; 3: and parameters
  int64_t micro_batch = 1;     // sequences per micro-batch on a rank
  int64_t seq = 2048;          // T
  bool checkpointing = false;  // keep only each block's input, recompute it in backward
};

// Note [Memory plan]
// Per rank, for the stage that holds the most (pipeline: the first or the last):
//   parameters  4 bytes each (float32 master weights); the split Linears' matrices (attention and
//               MLP) divided by tp, norms and embeddings whole; blocks L / pp of them; the
//               embedding on the first stage, the final norm and an untied (or, across stages,
//               tied) head on the last; / dp under ZeRO-3;
//   gradients   4 bytes each (float32), / dp under ZeRO-2 and 3;
//   optimizer   8 bytes each (AdamW's two moments in float32), / dp under ZeRO-1, 2 and 3;
//   activations per block and token, 2 bytes each (bf16) with fused flash attention (no T x T
//               scores kept): 8 C whole (the norms' inputs and the split Linears' inputs) plus
//               (2 (C + 2 C_kv) + 2 C + MLP) / tp split (q, k, v, attention output; the MLP's
//               hidden: GELU 4 F, SwiGLU 6 F), after Korthikanti et al. 2022 (34 s b h without
//               dropout masks and scores, with tensor parallelism) and times micro_batch x T; a
//               pipeline's first stage holds pp micro-batches in flight under 1F1B, so L blocks'
//               worth; with checkpointing each block keeps its input (2 C per token) and one
//               block's full set is alive during its recompute.
struct RankMemory {
  int64_t parameters = 0;  // on this rank (after tp, pp and ZeRO-3)
  double parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0, activation_bytes = 0;
  double total() const {
    return parameter_bytes + gradient_bytes + optimizer_bytes + activation_bytes;
  }
};

// The largest rank's memory; errors name the layout when tp does not divide the heads, key/value
// heads or F, or pp the layers.
RankMemory plan_memory(const ModelShape& m, const Layout& l);

// Every layout of `gpus` ranks worth printing: dp x tp x pp = gpus with tp dividing the heads, the
// key/value heads and F and pp dividing the layers; ZeRO 0 and 3 when dp > 1 (a pipeline of
// tensor-parallel stages too: FSDP over each stage's copies).
std::vector<Layout> layouts_for(const ModelShape& m, int gpus, int64_t micro_batch, int64_t seq,
                                bool checkpointing);

// The table train_gpt --plan-only prints: one row per layout, GiB per rank, and whether it fits
// `device_gib`.
std::string memory_table(const ModelShape& m, const std::vector<int>& gpu_counts,
                         int64_t micro_batch, int64_t seq, bool checkpointing, double device_gib);

}  // namespace loom::distributed
