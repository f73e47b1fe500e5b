// The Vision Transformer's modules (nn/vit.h): its configurations, the patch embedding and the
// model around the transformer stack of nn/transformer.h.
// Leaves out: the transformer block itself (nn/transformer.cpp) and training programs.
#include "nn/vit.h"

#include <cmath>

#include "autograd/ops/ops.h"
#include "nn/init.h"

namespace loom::nn {

// ---------------------------------------------------------------- config

ViTConfig ViTConfig::vit_b16() { return ViTConfig{}; }

ViTConfig ViTConfig::fashion_mnist(int64_t patch_size) {
  return ViTConfig{.image_size = 28,
                   .patch_size = patch_size,
                   .in_channels = 1,
                   .num_classes = 10,
                   .n_layer = 6,
                   .n_head = 4,
                   .n_embd = 128};
}

int64_t ViTConfig::num_patches() const {
  const int64_t side = image_size / patch_size;
  return side * side;
}

// GPT-2's block (TransformerConfig's default) without the causal mask, with exact-erf GELU.
TransformerConfig ViTConfig::block_config() const {
  return TransformerConfig{.n_embd = n_embd,
                           .n_head = n_head,
                           .causal = false,
                           .dropout = dropout,
                           .norm_eps = ln_eps,
                           .gelu_approximate = "none"};
}

void ViTConfig::check() const {
  LOOM_CHECK(image_size > 0 && patch_size > 0 && in_channels > 0 && num_classes > 0 &&
                 n_layer > 0 && n_head > 0 && n_embd > 0,
             "ViTConfig: every size must be positive (image_size ", image_size, ", patch_size ",
             patch_size, ", in_channels ", in_channels, ", num_classes ", num_classes, ", n_layer ",
             n_layer, ", n_head ", n_head, ", n_embd ", n_embd, ")");
  LOOM_CHECK(image_size % patch_size == 0, "ViTConfig: image_size ", image_size,
             " is not a multiple of patch_size ", patch_size);
  LOOM_CHECK(n_embd % n_head == 0, "ViTConfig: n_embd ", n_embd, " is not divisible by n_head ",
             n_head);
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "ViTConfig: dropout ", dropout, " is not in [0, 1)");
  LOOM_CHECK(ln_eps > 0.0, "ViTConfig: ln_eps ", ln_eps, " must be positive");
}

// ---------------------------------------------------------------- patch embedding

PatchEmbedding::PatchEmbedding(int64_t in_channels, int64_t n_embd, int64_t p)
    : Module("PatchEmbedding"), patch_size(p) {
  proj = register_module("proj", make<Conv2d>(in_channels, n_embd, p, Conv2dOptions{.stride = p}));
}

Tensor PatchEmbedding::forward(const Tensor& x) {
  LOOM_CHECK(
      x.defined() && x.dim() == 4 && x.size(2) % patch_size == 0 && x.size(3) % patch_size == 0,
      "PatchEmbedding(patch_size=", patch_size, "): input ",
      x.defined() ? describe(x) : std::string("undefined"),
      " should be (B, C, H, W) with H and W multiples of ", patch_size);
  Tensor y = proj(x);                     // (B, C, H/p, W/p)
  return transpose(flatten(y, 2), 1, 2);  // (B, C, N) -> (B, N, C)
}

// ---------------------------------------------------------------- the model

VisionTransformer::VisionTransformer(ViTConfig cfg) : Module("VisionTransformer"), config(cfg) {
  config.check();
  const int64_t C = cfg.n_embd;
  patch_embed =
      register_module("patch_embed", make<PatchEmbedding>(cfg.in_channels, C, cfg.patch_size));
  cls_token = zeros({1, 1, C});
  register_parameter("cls_token", cls_token);
  pos_embed = zeros({1, 1 + cfg.num_patches(), C});
  register_parameter("pos_embed", pos_embed);
  drop = register_module("drop", make<Dropout>(cfg.dropout));
  const TransformerConfig block = cfg.block_config();
  blocks = register_module("blocks", make<TransformerStack>(block, cfg.n_layer));
  norm = register_module("norm", make_norm(block));
  head = register_module("head", make<Linear>(C, cfg.num_classes));
  init_weights();
}

void VisionTransformer::init_weights() {
  const auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(patch_embed->proj->weight);
  init::normal_(patch_embed->proj->weight, 0.0, std::sqrt(1.0 / double(fan_in)));
  init::normal_(pos_embed, 0.0, 0.02);
  init::zeros_(cls_token);
  for (size_t i = 0; i < blocks->size(); ++i)
    for (const auto& [name, p] : blocks->block(i)->named_parameters()) {
      if (name.ends_with(".bias"))
        init::zeros_(p);
      else if (name.starts_with("ln_"))
        init::ones_(p);
      else
        init::xavier_uniform_(p);  // attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj
    }
  init::zeros_(patch_embed->proj->bias);
  for (const auto& [name, p] : norm->named_parameters()) {  // weight 1, bias 0
    if (name == "weight")
      init::ones_(p);
    else
      init::zeros_(p);
  }
  init::zeros_(head->weight);
  init::zeros_(head->bias);
}

Tensor VisionTransformer::features(const Tensor& x) {
  const ViTConfig& c = config;
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == c.in_channels &&
                 x.size(2) == c.image_size && x.size(3) == c.image_size,
             "VisionTransformer: input ", x.defined() ? describe(x) : std::string("undefined"),
             " should be (B, ", c.in_channels, ", ", c.image_size, ", ", c.image_size, ")");
  Tensor t = patch_embed(x);  // (B, N, C); in the autocast dtype under autocast
  if (t.dtype() != cls_token.dtype()) t = loom::to(t, cls_token.dtype());  // the residual stream's
  const int64_t B = x.size(0);
  Tensor cls = expand(cls_token, {B, 1, c.n_embd});  // (B, 1, C)
  Tensor h = drop(cat({cls, t}, 1) + pos_embed);     // (B, 1 + N, C)
  return blocks->forward(h, *norm);                  // norm(blocks(h)): (B, 1 + N, C)
}

Tensor VisionTransformer::forward(const Tensor& x) {
  Tensor f = features(x);        // (B, 1 + N, C)
  return head(select(f, 1, 0));  // the class token (B, C) -> (B, num_classes)
}

int64_t VisionTransformer::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

}  // namespace loom::nn
