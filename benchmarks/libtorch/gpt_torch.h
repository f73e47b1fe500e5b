// gpt_torch: the libtorch twin of loom's GPT (nn/gpt.h) for bench_train_torch's gpt and gpt-mini
// workloads. The same architecture (pre-norm blocks, one qkv Linear, causal attention, tanh GELU,
// the output head tied to the token embedding), GPT-2's init, and the loss over every position;
// AdamW with GPT-2's two parameter groups. Attention is PyTorch's fused
// scaled_dot_product_attention (flash attention on an H200 in bf16) from PyTorch 2.0 on; Debian's
// libtorch 1.13 has none, so there it is the composite (matmul, mask, softmax, matmul). The block
// also serves the ViT twin (benchmarks/libtorch/vision_torch.h), as loom's ViT reuses GPT's
// TransformerBlock: Config's causal, gelu and ln_eps say how.
// Leaves out: dropout (the benchmark trains without it), the KV cache and sampling, bias-free
// layers, activation checkpointing.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace gpt_torch {

struct Config {
  int64_t vocab = 50304, block = 1024, layers = 12, heads = 12, width = 768;
  // The block's variant: GPT's (causal attention, tanh GELU, LayerNorm eps 1e-5), or the ViT's
  // (non-causal, exact erf GELU "none", eps 1e-6).
  bool causal = true;
  std::string gelu = "tanh";
  double ln_eps = 1e-5;
};

// x: (B, T, C) -> (B, T, C): x + attn_proj(attention(c_attn(ln_1(x)))), then
// x + mlp_proj(gelu(c_fc(ln_2(x)))), the MLP 4C wide.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const Config& c)
      : heads(c.heads), width(c.width), causal(c.causal), gelu(c.gelu) {
    auto ln = torch::nn::LayerNormOptions({c.width}).eps(c.ln_eps);
    ln_1 = register_module("ln_1", torch::nn::LayerNorm(ln));
    c_attn = register_module("c_attn", torch::nn::Linear(c.width, 3 * c.width));
    attn_proj = register_module("attn_proj", torch::nn::Linear(c.width, c.width));
    ln_2 = register_module("ln_2", torch::nn::LayerNorm(ln));
    c_fc = register_module("c_fc", torch::nn::Linear(c.width, 4 * c.width));
    mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * c.width, c.width));
  }

  // q, k, v: (B, H, T, D) -> (B, H, T, D), causal or not.
  static torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR >= 2
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
#else
    int64_t T = q.size(2);
    auto s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(3)));  // (B, H, T, T)
    if (causal) {
      auto mask = torch::ones({T, T}, q.options().dtype(torch::kBool)).triu(1);
      s = s.masked_fill(mask, -std::numeric_limits<float>::infinity());
    }
    return torch::matmul(torch::softmax(s, -1), v);
#endif
  }

  torch::Tensor forward(torch::Tensor x) {  // (B, T, C)
    int64_t B = x.size(0), T = x.size(1), D = width / heads;
    auto qkv = c_attn(ln_1(x)).view({B, T, 3, heads, D}).permute({2, 0, 3, 1, 4});  // 3 (B,H,T,D)
    auto y = attention(qkv[0], qkv[1], qkv[2], causal).transpose(1, 2).reshape({B, T, width});
    x = x + attn_proj(y);
    return x + mlp_proj(torch::gelu(c_fc(ln_2(x)), gelu));
  }

  int64_t heads, width;
  bool causal;
  std::string gelu;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
};
TORCH_MODULE(Block);

struct GPTImpl : torch::nn::Module {
  explicit GPTImpl(const Config& c) : vocab(c.vocab) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.width));
    wpe = register_module("wpe", torch::nn::Embedding(c.block, c.width));
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c));
    register_module("h", blocks);
    ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    // GPT-2's init: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 L)), biases 0.
    torch::NoGradGuard g;
    for (auto& p : named_parameters()) {
      const std::string& n = p.key();
      if (n.find("ln_") != std::string::npos) continue;  // LayerNorms keep 1 and 0
      if (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0)
        p.value().zero_();
      else
        p.value().normal_(0.0, n.find("proj") != std::string::npos
                                   ? 0.02 / std::sqrt(2.0 * double(c.layers))
                                   : 0.02);
    }
  }

  // idx: (B, T) int64 -> logits (B, T, V); the head is wte's matrix (tied).
  torch::Tensor forward(const torch::Tensor& idx) {
    auto pos = torch::arange(idx.size(1), idx.options());
    auto x = wte(idx) + wpe(pos);
    for (const auto& b : *blocks) x = b->as<BlockImpl>()->forward(x);
    return torch::matmul(ln_f(x), wte->weight.t());
  }

  int64_t vocab;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT);

// AdamW as GPT-2 trains: betas (0.9, 0.95), weight decay 0.1 on the matrices only.
inline std::unique_ptr<torch::optim::AdamW> adamw(GPT& m, double lr) {
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& p : m->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  auto o = torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(0.1);
  auto o0 = o;
  o0.weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(o));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(o0));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), o);
}

}  // namespace gpt_torch
