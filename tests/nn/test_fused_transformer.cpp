// The fused transformer (nn/fused_transformer.h, swapped in by nn::fuse) against the plain model,
// its oracle: GPT's and the Vision Transformer's loss and every gradient in float64, with and
// without activation checkpointing, with and without dropout; the fused model's KV cache against
// its full forward and the plain model's; the fused ops in the graph; keys, parameters and
// checkpoints unchanged both ways; the printed model, fusion_summary and a second fuse; anomaly
// mode; a model of one's own fused through fuse_transformer. Leaves out: the fused ops against
// their composites (tests/autograd), CUDA (the ops' CUDA tests,
// tests/autograd/test_cuda_checkpoint.cpp), FSDP (tests/distributed/fsdp/test_fsdp.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "autograd/anomaly.h"
#include "autograd/node.h"
#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "nn/fuse.h"
#include "nn/fuse_transformer.h"
#include "nn/fused_transformer.h"
#include "nn/gpt_sample.h"
#include "nn/init.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;

namespace {

GPTConfig gpt_config(double dropout = 0.0) {
  return GPTConfig{.vocab_size = 37,
                   .block_size = 16,
                   .n_layer = 3,
                   .n_head = 4,
                   .n_embd = 32,
                   .dropout = dropout};
}

ViTConfig vit_config(double dropout = 0.0) {
  return ViTConfig{.image_size = 8,
                   .patch_size = 4,
                   .in_channels = 2,
                   .num_classes = 3,
                   .n_layer = 3,
                   .n_head = 2,
                   .n_embd = 16,
                   .dropout = dropout};
}

// A model of `seed`'s weights in float64, fused by nn::fuse when asked.
template <typename M, typename C>
std::shared_ptr<M> model(const C& cfg, uint64_t seed, bool fused) {
  manual_seed(seed);
  auto m = std::make_shared<M>(cfg);
  if constexpr (std::is_same_v<M, VisionTransformer>)  // a head away from its zero init
    init::normal_(m->head->weight, 0.0, 0.5);
  if (fused) {
    EXPECT_FALSE(fuse(*m).empty());
  }
  m->to(kF64);
  return m;
}

struct Outcome {
  double loss = 0;
  NamedTensors grads;
};

// One loss and backward, the dropout stream seeded first; the gradients by name.
template <typename F>
Outcome run(Module& m, F loss) {
  m.zero_grad();
  manual_seed(77);
  Tensor l = loss();
  l.backward();
  Outcome o{l.item<double>(), {}};
  for (const auto& [name, p] : m.named_parameters()) o.grads.emplace_back(name, p.grad());
  return o;
}

double max_abs(const Tensor& t) { return max(abs(t)).item<double>(); }

// The fused model's loss and every gradient against the plain model's, to float64 rounding; the
// gradients must be non-zero, so that they compare something.
void expect_same(const Outcome& plain, const Outcome& fused, const std::string& what) {
  EXPECT_NEAR(fused.loss, plain.loss, 1e-12 * (1 + std::abs(plain.loss))) << what;
  ASSERT_EQ(fused.grads.size(), plain.grads.size()) << what;
  double largest = 0;
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    const auto& [name, g] = plain.grads[i];
    ASSERT_EQ(fused.grads[i].first, name) << what;
    ASSERT_TRUE(g.defined() && fused.grads[i].second.defined()) << what << " " << name;
    const double scale = max_abs(g);
    largest = std::max(largest, scale);
    EXPECT_LE(max_abs(fused.grads[i].second - g), 1e-10 * (1 + scale)) << what << " " << name;
  }
  EXPECT_GT(largest, 1e-3) << what;
}

Tensor random_ids(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  return randint(0, 37, {B, T}, {.dtype = kI64}, &g);
}

// The names of the graph's nodes below `t` (without the leaves' accumulators), in the order the
// forward recorded them.
std::vector<std::string> recorded_ops(const Tensor& t) {
  std::vector<std::shared_ptr<autograd::Node>> todo{t.grad_fn()}, seen;
  while (!todo.empty()) {
    auto n = todo.back();
    todo.pop_back();
    if (!n || n->is_accumulate_grad() || std::find(seen.begin(), seen.end(), n) != seen.end())
      continue;
    seen.push_back(n);
    for (const auto& e : n->next) todo.push_back(e.node);
  }
  std::sort(seen.begin(), seen.end(),
            [](auto& a, auto& b) { return a->sequence_nr < b->sequence_nr; });
  std::vector<std::string> out;
  for (const auto& n : seen) out.emplace_back(n->name);
  return out;
}

int64_t count(const std::vector<std::string>& ops, const std::string& name) {
  return std::count(ops.begin(), ops.end(), name);
}

std::string printed(const Module& m) {
  std::ostringstream os;
  os << m;
  return os.str();
}

// A model of one's own built from the stack (docs/adding-a-model.md's TinyLM): (B, T) ids ->
// (B, T, V) logits, without position embeddings.
class TinyLM : public Module {
 public:
  TinyLM() : Module("TinyLM") {
    TransformerConfig block{.n_embd = 16, .n_head = 2, .causal = true};
    tok = register_module("tok", make<Embedding>(37, 16));
    blocks = register_module("blocks", make<TransformerStack>(block, 2));
    norm = register_module("norm", make_norm(block));
    head = register_module("head", make<Linear>(16, 37));
  }
  Tensor forward(const Tensor& idx) override { return head(blocks->forward(tok(idx), *norm)); }

  ModuleHolder<Embedding> tok;
  ModuleHolder<TransformerStack> blocks;
  ModuleHolder<Module> norm;
  ModuleHolder<Linear> head;
};

}  // namespace

// GPT: the head and loss as one op (GPT::loss) over the fused chain, against the plain blocks;
// checkpointed, each block one node recomputed in backward (the fused block alone, ln_f plain).
TEST(FusedTransformer, GptLossAndGradientsEqualThePlainModel) {
  for (double dropout : {0.0, 0.1})
    for (bool ckpt : {false, true}) {
      const GPTConfig c = gpt_config(dropout);
      auto plain = model<GPT>(c, 5, false), fused = model<GPT>(c, 5, true);
      plain->set_activation_checkpointing(ckpt);
      fused->set_activation_checkpointing(ckpt);
      const Tensor idx = random_ids(3, 12, 1), tgt = random_ids(3, 12, 2);
      expect_same(run(*plain, [&] { return plain->loss(idx, tgt); }),
                  run(*fused, [&] { return fused->loss(idx, tgt); }),
                  str("dropout ", dropout, ", checkpointing ", ckpt));
    }
}

// The Vision Transformer: exact GELU (its MLP stays as it is), the chain into the final norm.
TEST(FusedTransformer, VitLossAndGradientsEqualThePlainModel) {
  for (double dropout : {0.0, 0.1})
    for (bool ckpt : {false, true}) {
      const ViTConfig c = vit_config(dropout);
      auto plain = model<VisionTransformer>(c, 6, false);
      auto fused = model<VisionTransformer>(c, 6, true);
      plain->set_activation_checkpointing(ckpt);
      fused->set_activation_checkpointing(ckpt);
      manual_seed(3);
      const Tensor x = randn({4, 2, 8, 8}, {.dtype = kF64}), y = randint(0, 3, {4});
      expect_same(run(*plain, [&] { return cross_entropy(plain->forward(x), y); }),
                  run(*fused, [&] { return cross_entropy(fused->forward(x), y); }),
                  str("dropout ", dropout, ", checkpointing ", ckpt));
    }
}

// Generation: the fused model's cached step gives its full forward's last position and the plain
// model's, and generate draws the same tokens with and without the cache.
TEST(FusedTransformer, KvCacheStepEqualsTheFullForward) {
  auto plain = model<GPT>(gpt_config(), 8, false), fused = model<GPT>(gpt_config(), 8, true);
  plain->eval();
  fused->eval();
  const Tensor ids = random_ids(1, 7, 9);
  NoGradGuard g;
  KVCache cache;
  fused->forward(slice(ids, 1, 0, 6), cache);
  Tensor step = select(fused->forward(slice(ids, 1, 6, 7), cache), 1, 0);  // (1, V)
  EXPECT_EQ(cache.length, 7);
  EXPECT_LT(max_abs(step - select(fused->forward(ids), 1, 6)), 1e-12);
  EXPECT_LT(max_abs(step - select(plain->forward(ids), 1, 6)), 1e-12);
  SampleOptions o{.max_new_tokens = 8, .temperature = 1.0, .top_k = 5, .seed = 4};
  const std::vector<int64_t> prompt{3, 1, 4, 1, 5};
  auto cached = generate(*fused, prompt, o);
  o.use_cache = false;
  EXPECT_EQ(cached, generate(*fused, prompt, o));
  EXPECT_EQ(cached, generate(*plain, prompt, o));
}

// The plain GPT records the MLP as Linear, GELU, Linear; the fused one as one gelu_mlp node per
// block. Both record each residual add and layer norm (fused: one add_layer_norm pass records
// the two nodes), 2 L + 1 layer norms in all.
TEST(FusedTransformer, TheFusedGraphHasOneMlpNodePerBlock) {
  const GPTConfig c = gpt_config();
  auto plain = model<GPT>(c, 10, false), fused = model<GPT>(c, 10, true);
  const Tensor idx = random_ids(2, 8, 3), tgt = random_ids(2, 8, 4);
  auto p = recorded_ops(plain->loss(idx, tgt)), f = recorded_ops(fused->loss(idx, tgt));
  EXPECT_EQ(count(p, "gelu_mlp"), 0);
  EXPECT_EQ(count(p, "gelu_tanh"), c.n_layer);
  EXPECT_EQ(count(f, "gelu_mlp"), c.n_layer);
  EXPECT_EQ(count(f, "gelu_tanh"), 0);
  EXPECT_EQ(count(f, "linear"), count(p, "linear") - 2 * c.n_layer);
  EXPECT_EQ(count(f, "layer_norm"), 2 * c.n_layer + 1);
  EXPECT_EQ(count(p, "layer_norm"), 2 * c.n_layer + 1);
  EXPECT_EQ(count(f, "add"), count(p, "add"));
}

// Note [Fused modules keep the unfused keys]: the same state_dict keys in the same order, the very
// tensors as parameters in the same order, and a checkpoint of either model loads into the other.
TEST(FusedTransformer, KeysParametersAndCheckpointsAreUnchanged) {
  auto plain = model<GPT>(gpt_config(), 11, false);
  manual_seed(11);
  auto fused = std::make_shared<GPT>(gpt_config());
  const auto before = fused->named_parameters();
  const StateDict keys = fused->state_dict();
  fuse(*fused);
  const auto after = fused->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_TRUE(after[i].second.is_same(before[i].second)) << after[i].first;
  }
  const StateDict sd = fused->state_dict();
  ASSERT_EQ(sd.size(), keys.size());
  for (size_t i = 0; i < sd.size(); ++i) EXPECT_EQ(sd[i].first, keys[i].first);
  EXPECT_TRUE(fused->lm_head->weight.is_same(fused->wte->weight));  // still tied
  fused->to(kF64);
  for (Tensor p : fused->parameters()) {
    NoGradGuard g;
    p.copy_(p + 0.01 * randn(p.shape(), {.dtype = kF64}));  // away from plain's weights
  }
  test::TempDir dir;
  TrainingState st;
  st.model = fused->state_dict();
  plain->load_state_dict(load_checkpoint(save_checkpoint(dir.path, 1, st)).model);
  const Tensor idx = random_ids(2, 9, 5);
  EXPECT_LT(max_abs(plain->forward(idx) - fused->forward(idx)), 1e-12);
  st.model = plain->state_dict();  // and back
  fused->load_state_dict(st.model);
  EXPECT_LT(max_abs(plain->forward(idx) - fused->forward(idx)), 1e-12);
}

// Printed, each model says what runs: the plain one its GELU as a child; the fused one the fused
// modules, with no GELU child where the GELU runs in the epilogue, and the ViT's exact GELU MLP
// as it was.
TEST(FusedTransformer, ThePrintedModelNamesWhatRuns) {
  GPTConfig c = gpt_config();
  c.n_layer = 1;
  manual_seed(1);
  GPT gpt(c);
  const std::string plain = printed(gpt);
  for (const char* s : {"(h): TransformerStack(\n", "(0): TransformerBlock(\n",
                        "(ln_1): LayerNorm([32], eps=1e-05", "(attn): CausalSelfAttention(\n",
                        "(mlp): MLP(\n", "(gelu): GELU(approximate='tanh')", "(ln_f): LayerNorm("})
    EXPECT_NE(plain.find(s), std::string::npos) << s << " in\n" << plain;
  fuse(gpt);
  const std::string fused = printed(gpt);
  for (const char* s :
       {"(h): FusedTransformerStack(each block's last residual add in the next",
        "(0): FusedTransformerBlock(the attention's residual add in ln_2",
        "(ln_1): FusedAddLayerNorm(LayerNorm([32], eps=1e-05", "(ln_2): FusedAddLayerNorm(",
        "(attn): CausalSelfAttention(\n",
        "(mlp): LinearGELULinear(c_fc, GELU(approximate='tanh') in its epilogue",
        "(c_fc): Linear(in_features=32, out_features=128", "(ln_f): FusedAddLayerNorm(LayerNorm("})
    EXPECT_NE(fused.find(s), std::string::npos) << s << " in\n" << fused;
  for (const char* s :
       {"(gelu)", ": TransformerStack(", ": TransformerBlock(", ": LayerNorm(", ": MLP("})
    EXPECT_EQ(fused.find(s), std::string::npos) << s << " in\n" << fused;

  ViTConfig v = vit_config();
  v.n_layer = 1;
  VisionTransformer vit(v);
  fuse(vit);
  const std::string vit_fused = printed(vit);
  for (const char* s :
       {"(blocks): FusedTransformerStack(", "(attn): SelfAttention(\n", "(mlp): MLP(\n",
        "(gelu): GELU(approximate='none')", "(norm): FusedAddLayerNorm(LayerNorm([16], eps=1e-06"})
    EXPECT_NE(vit_fused.find(s), std::string::npos) << s << " in\n" << vit_fused;
}

// nn::fuse reports the stack, each block and the final norm, with the model's path in front; a
// second call finds nothing; fuse_transformer alone does the same.
TEST(FusedTransformer, FuseReportsTheTrunkOnceAtItsPath) {
  GPTConfig c = gpt_config();
  c.n_layer = 2;
  auto outer = make<Sequential>(std::make_shared<GPT>(c));
  EXPECT_EQ(fusion_summary(fuse(*outer)),
            "nn::fuse: 4 fusions: 0.h FusedTransformerStack, 0.h.0 FusedTransformerBlock, 0.h.1 "
            "FusedTransformerBlock, 0.ln_f FusedAddLayerNorm");
  EXPECT_EQ(fusion_summary(fuse(*outer)), "nn::fuse: nothing to fuse");
  auto gpt = outer->at<GPT>(0);
  EXPECT_TRUE(std::dynamic_pointer_cast<FusedTransformerStack>(gpt->h) != nullptr);
  EXPECT_EQ(gpt->h.get(), gpt->named_children()[3].second.get());  // the member and the child
  EXPECT_EQ(gpt->ln_f.get(), gpt->named_children()[4].second.get());

  VisionTransformer vit(vit_config());
  EXPECT_EQ(fuse_transformer(vit).size(), 5u);  // blocks, blocks.0 .. blocks.2, norm
  EXPECT_TRUE(fuse_transformer(vit).empty());
  EXPECT_EQ(fusion_summary(fuse(vit)), "nn::fuse: nothing to fuse");
}

// train()/eval() reach the shared children and the plain MLP the fused one keeps; anomaly mode
// runs the plain layers (no gelu_mlp node) and gets the same loss.
TEST(FusedTransformer, ModesAndAnomalyModeRunThePlainLayers) {
  auto fused = model<GPT>(gpt_config(0.1), 12, true);
  auto block = fused->h->at<FusedTransformerBlock>(0);
  auto mlp = std::dynamic_pointer_cast<LinearGELULinear>(block->mlp);
  ASSERT_NE(mlp, nullptr);
  fused->eval();
  EXPECT_FALSE(mlp->mlp->is_training());
  EXPECT_FALSE(mlp->dropout->is_training());
  EXPECT_FALSE(block->attn->resid_dropout->is_training());
  EXPECT_FALSE(block->norm_1->ln->is_training());
  const Tensor idx = random_ids(2, 6, 7), tgt = random_ids(2, 6, 8);
  Tensor fast = fused->loss(idx, tgt);
  EXPECT_EQ(count(recorded_ops(fused->loss(idx, tgt)), "gelu_mlp"), 3);
  autograd::DetectAnomalyGuard anomaly;
  Tensor slow = fused->loss(idx, tgt);
  EXPECT_EQ(count(recorded_ops(slow), "gelu_mlp"), 0);
  EXPECT_NEAR(slow.item<double>(), fast.item<double>(), 1e-12);
}

// A model whose blocks or final norm are not LayerNorms is left alone; a fused module refuses
// what it cannot run, naming it.
TEST(FusedTransformer, RefusesWhatItCannotFuse) {
  auto exact = std::make_shared<MLP>(vit_config().block_config());
  try {
    LinearGELULinear l(exact);
    FAIL() << "an exact GELU was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'none'"), std::string::npos) << e.what();
  }
  GPT gpt(gpt_config());
  ModuleHolder<TransformerStack> stack = gpt.h;
  ModuleHolder<Module> not_a_child = make<LayerNorm>(32);
  EXPECT_THROW(fuse_transformer(gpt, stack, not_a_child), Error);
  EXPECT_EQ(gpt.h->type_name(), "TransformerStack");  // nothing replaced before the error
}

// A fused stack followed by a norm other than a FusedAddLayerNorm adds the last MLP output itself
// and then runs that norm: the plain stack's result.
TEST(FusedTransformer, AnyFinalNormGetsTheWholeResidualStream) {
  manual_seed(13);
  TransformerStack plain(gpt_config().block_config(), 2);
  FusedTransformerStack fused(plain);
  LayerNorm norm(32);
  Tensor x = randn({2, 5, 32});
  EXPECT_LT(max_abs(fused.forward(x, norm) - plain.forward(x, norm)), 1e-5);
  EXPECT_GT(max_abs(fused.forward(x, norm)), 0.5);
}

// A model nn::fuse does not know names its trunk to fuse_transformer, which puts the fused stack
// and norm into its children and into the two members its forward calls: the plain model's loss
// and gradients.
TEST(FusedTransformer, AModelOfOnesOwnNamesItsTrunk) {
  manual_seed(14);
  auto plain = std::make_shared<TinyLM>();
  manual_seed(14);
  auto fused = std::make_shared<TinyLM>();
  EXPECT_TRUE(fuse(*fused).empty());  // nn::fuse cannot know TinyLM's members
  EXPECT_EQ(fusion_summary(fuse_transformer(*fused, fused->blocks, fused->norm)),
            "nn::fuse: 4 fusions: blocks FusedTransformerStack, blocks.0 FusedTransformerBlock, "
            "blocks.1 FusedTransformerBlock, norm FusedAddLayerNorm");
  EXPECT_EQ(fused->blocks.get(), fused->named_children()[1].second.get());
  EXPECT_EQ(fused->norm->type_name(), "FusedAddLayerNorm");
  plain->to(kF64);
  fused->to(kF64);
  const Tensor idx = random_ids(2, 7, 15), tgt = random_ids(2, 7, 16);
  auto loss = [&](Module& m) { return cross_entropy(flatten(m.forward(idx), 0, 1), flatten(tgt)); };
  expect_same(run(*plain, [&] { return loss(*plain); }), run(*fused, [&] { return loss(*fused); }),
              "TinyLM");
  EXPECT_EQ(count(recorded_ops(loss(*fused)), "gelu_mlp"), 2);
}
