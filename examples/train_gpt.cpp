// train_gpt: trains a language model on a text, next-token prediction: GPT-2's architecture
// (nn/gpt.h) or, with --arch llama, Llama's (nn/llama.h); on the GPU if there is one, else on the
// CPU. Prints train and validation loss, tokens/s and MFU; checkpoints with exact resume,
// TensorBoard, --amp bf16 (or fp8: docs/fp8.md), --cuda-graph, --grad-accum, LoRA (--lora-rank),
// Hugging Face folders in and out (--init-from, --save-hf), any tokenizer (--tokenizer), and
// unchanged under loomrun with DDP, ZeRO (--zero), tensor parallel (--tp, --sequence-parallel) or
// pipeline stages (--pp).
// --sample N then prints N tokens generated from --prompt (KV cache: nn/gpt_sample.h).
// --plan-only prints the memory per rank of every parallel layout and exits (docs/parallelism.md).
//
//   ./build/examples/train_gpt --text $(scripts/gpt-corpus.sh)   # the KJV Bible, the "mini" model
//   ./build/examples/train_gpt --text kjv.txt --tokenizer tokenizer.json   # BPE,
//   docs/tokenizers.md
//   ./build/examples/train_gpt --text kjv.txt --arch llama --model tiny     # docs/llama.md
//   ./build/examples/train_gpt --shards data/ --init-from hf-folder/ --lora-rank 8 --save-hf out/
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_gpt
//   ./build/distributed/launcher/loomrun --nproc_per_node=4 ./build/examples/train_gpt --tp 2
//
// main below shows the training step (zero_grad, forward and loss, backward, clip, AdamW's step)
// and the loop: intervals of --eval-every steps, each ending with the validation loss. train::Run
// (train/run.h) keeps the books around them: loss window, log, checkpoints, signals.
#include <cstdio>
#include <filesystem>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "data/tokenizer.h"
#include "distributed/parallel/parallelize.h"
#include "nn/amp/grad_scaler.h"
#include "nn/fuse.h"
#include "nn/gpt_sample.h"
#include "nn/lora.h"
#include "nn/optim/lr_scheduler.h"
#include "train/cuda_graph_step.h"
#include "train/flags.h"
#include "train/language_model.h"
#include "train/make_optimizer.h"
#include "train/run.h"
#include "train/token_data.h"

using namespace loom;

namespace {

struct GptFlags {
  train::LanguageModelSpec lm;  // --arch, --model, --n-layer, ..., --init-from
  train::TokenDataConfig data{.text = "", .shards = "", .seq_len = 128};
  int64_t eval_every = 100;
  int64_t warmup = 100;
  double min_lr_ratio = 0.1;  // the cosine schedule ends at lr * this
  double grad_clip = 1.0;
  bool activation_checkpointing = false;
  double peak_tflops = 989.0;  // H100/H200 dense bf16, for the MFU column
  int64_t sample = 0;
  std::string prompt = "\n";
  nn::SampleOptions sampling;
  std::string tokenizer = "bytes";  // --tokenizer: data::load_tokenizer's spec
  std::string save_hf;              // a Hugging Face folder written after training
  std::string save_adapter;         // --lora-rank's adapters, as PEFT writes them
  bool decode_sample = true;        // false: shards of unknown tokens, printed as ids
  nn::LoRAOptions lora{.rank = 0};  // --lora-rank > 0: train low-rank adapters only (nn/lora.h)
  bool plan_only = false;           // print the memory per rank of each layout, then exit
  std::vector<int> plan_gpus{1, 2, 4, 8};
  int64_t plan_micro_batch = 1;
};

void add_lora_flags(CLI::App& app, nn::LoRAOptions& o) {
  app.add_option("--lora-rank", o.rank,
                 "fine-tune through LoRA adapters of this rank on --lora-targets, the rest "
                 "frozen (0: train every weight)")
      ->check(train::int_range(0, 65536));
  app.add_option("--lora-alpha", o.alpha, "the adapters' scale is alpha / rank")
      ->check(train::real_range(0, 1e6, true));
  app.add_option("--lora-dropout", o.dropout, "dropout on the adapters' input")
      ->check(train::real_range(0, 0.99));
  app.add_option("--lora-targets", o.targets, "the Linears to adapt, by name")->delimiter(',');
}

void add_gpt_flags(CLI::App& app, GptFlags& g) {
  app.add_option("--arch", g.lm.arch, "gpt2 or llama (nn/gpt.h, nn/llama.h)")
      ->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--model", g.lm.preset,
                 "gpt2: mini, d12 (124M), d24, d36, d48; llama: tiny, llama3.2-1b, llama3.2-3b, "
                 "llama3-8b")
      ->check(CLI::IsMember(
          {"mini", "d12", "d24", "d36", "d48", "tiny", "llama3.2-1b", "llama3.2-3b", "llama3-8b"}));
  app.add_option("--n-layer", g.lm.n_layer, "blocks (0: the model's)")
      ->check(train::int_range(0, 1024));
  app.add_option("--n-head", g.lm.n_head, "attention heads (0: the model's)")
      ->check(train::int_range(0, 1024));
  app.add_option("--n-embd", g.lm.n_embd, "width (0: the model's)")
      ->check(train::int_range(0, 65536));
  app.add_option("--n-kv-head", g.lm.n_kv_head, "llama: key/value heads (0: the model's)")
      ->check(train::int_range(0, 1024));
  app.add_option("--ffn-hidden", g.lm.ffn_hidden, "llama: the SwiGLU MLP's width (0: the model's)")
      ->check(train::int_range(0, 1 << 20));
  app.add_option("--text", g.data.text, "a UTF-8 text file to train on, tokenized by --tokenizer");
  app.add_option("--tokenizer", g.tokenizer,
                 "bytes (256 ids), a Hugging Face tokenizer.json or a tiktoken rank file "
                 "(docs/tokenizers.md); --vocab-size follows it unless given");
  app.add_option("--shards", g.data.shards, "or a folder of train_*.bin / val_*.bin token shards");
  app.add_option("--vocab-size", g.data.vocab_size,
                 "the model's vocabulary (default: the tokenizer's); 50257 for GPT-2 shards")
      ->check(train::int_range(2, 1 << 20));
  app.add_option("--seq-len", g.data.seq_len, "tokens per sequence (T)")
      ->check(train::int_range(1, 1 << 20));
  app.add_option("--val-fraction", g.data.val_fraction, "of --text kept for validation")
      ->check(train::real_range(0.001, 0.5));
  app.add_option("--eval-windows", g.data.val_windows, "validation windows per evaluation (0: all)")
      ->check(train::int_range(0, int64_t(1) << 40));
  app.add_option("--eval-every", g.eval_every, "steps between evaluations")
      ->check(train::int_range(1, 1 << 30));
  app.add_option("--warmup", g.warmup, "linear warm-up steps")->check(train::int_range(0, 1 << 30));
  app.add_option("--min-lr-ratio", g.min_lr_ratio, "the cosine schedule's last lr / --lr")
      ->check(train::real_range(0, 1));
  app.add_option("--grad-clip", g.grad_clip, "clip the global gradient norm (0: off)")
      ->check(train::real_range(0, 1e6));
  train::add_activation_checkpointing_flag(app, g.activation_checkpointing);
  app.add_option("--init-from", g.lm.init_from,
                 "start from a Hugging Face GPT-2 or Llama folder (config.json and safetensors, "
                 "as transformers saves them): its architecture, sizes and weights");
  app.add_option("--save-hf", g.save_hf,
                 "after training, write the model as a Hugging Face folder here");
  app.add_option("--save-adapter", g.save_adapter,
                 "after training, write the LoRA adapters here as PEFT does "
                 "(adapter_model.safetensors, adapter_config.json)");
  app.add_flag("--plan-only", g.plan_only,
               "print the memory per rank of every layout (dp with ZeRO, tp, pp) of --plan-gpus "
               "for the model, without allocating it, then exit (distributed/memory_plan.h)");
  app.add_option("--plan-gpus", g.plan_gpus, "the GPU counts --plan-only plans for")
      ->delimiter(',');
  app.add_option("--plan-micro-batch", g.plan_micro_batch, "sequences per rank and micro-batch")
      ->check(train::int_range(1, 1 << 20));
  app.add_option("--peak-tflops", g.peak_tflops, "the device's peak, for MFU")
      ->check(train::real_range(0, 1e6, true));
  app.add_option("--sample", g.sample, "after training, print N generated tokens")
      ->check(train::int_range(0, 1 << 20));
  app.add_option("--prompt", g.prompt, "the text the sample continues");
  app.add_option("--temperature", g.sampling.temperature, "sampling temperature (0: greedy)")
      ->check(train::real_range(0, 100));
  app.add_option("--top-k", g.sampling.top_k, "sample among the k most likely (0: all)")
      ->check(train::int_range(0, 1 << 20));
}

// How the run is reported: the model's name, tokens per step, MFU's FLOPs and peak.
train::RunPlan run_plan(const train::LanguageModel& lm, const GptFlags& g,
                        const train::TrainConfig& cfg, int64_t train_tokens) {
  const int64_t tokens_per_step = cfg.batch_size * g.data.seq_len;
  return {.title = lm.title,
          .train_examples = train_tokens,
          .unit = "tokens",
          .eval_every = g.eval_every,
          .samples_per_step = tokens_per_step,
          .flops_per_step = lm.flops_per_token(g.data.seq_len) * double(tokens_per_step),
          .peak_tflops = g.peak_tflops};
}

// --sample: N tokens after --prompt, the prompt and the sample decoded together by the run's
// tokenizer (ids with shards). A model from a Hugging Face folder (--init-from) was trained with
// its tokenizer's post-processor, so the prompt gets it too (Llama 2's <s> in front); text
// encoded for training here does not.
void print_sample(nn::CausalLM& model, const GptFlags& g, const data::Tokenizer& tok) {
  nn::SampleOptions o = g.sampling;
  const std::vector<int32_t> text_ids = tok.encode_ordinary(g.prompt);
  const std::vector<int32_t> prompt =
      g.lm.init_from.empty() ? text_ids : tok.post_process(text_ids);
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  o.max_new_tokens = std::min<int64_t>(g.sample, model.max_context() - int64_t(ids.size()));
  std::vector<int64_t> out = nn::generate(model, ids, o);
  std::vector<int32_t> tokens = text_ids;
  tokens.insert(tokens.end(), out.begin(), out.end());
  std::string text = g.decode_sample ? tok.decode(tokens) : g.prompt + "(token ids)";
  std::printf("--- sample (%zu tokens, temperature %g, top-k %ld) ---\n%s\n---\n", out.size(),
              o.temperature, long(o.top_k), text.c_str());
}

// --tokenizer: loads it; --vocab-size follows it unless given on the command line.
std::shared_ptr<const data::Tokenizer> load_run_tokenizer(const CLI::App& app, GptFlags& g) {
  std::shared_ptr<const data::Tokenizer> tok = data::load_tokenizer(g.tokenizer);
  if (app.count("--vocab-size") == 0 && g.data.shards.empty())
    g.data.vocab_size = tok->vocab_size();
  g.data.tokenizer = tok;
  g.decode_sample = !g.data.text.empty() || app.count("--tokenizer") > 0;
  g.lm.vocab_size = g.data.vocab_size, g.lm.seq_len = g.data.seq_len;
  return tok;
}

// After the run: --sample, --save-adapter (the adapters as PEFT writes them), --save-hf (merged).
// Under --tp or --pp the model is split over the ranks: rank 0 builds it whole from the gathered
// weights.
void after_training(train::LanguageModel& lm, distributed::ParallelModel& parallel,
                    const GptFlags& g, const train::RunSetup& setup,
                    const data::Tokenizer& tokenizer, bool split) {
  if (g.sample == 0 && g.save_hf.empty() && g.save_adapter.empty()) return;
  auto finish = [&](train::LanguageModel& whole) {  // rank 0, the model whole
    if (g.sample > 0) print_sample(*whole.net, g, tokenizer);
    if (!g.save_adapter.empty()) whole.save_adapter(g.save_adapter, g.lora);
    if (!g.save_hf.empty()) {
      nn::merge_lora(*whole.net);  // the adapters folded into the weights (none without LoRA)
      whole.save_hf(g.save_hf);
    }
  };
  if (split) {
    nn::StateDict sd = parallel.model_state_dict();  // gathered over tp and pp (a collective)
    if (!setup.main()) return;
    train::LanguageModel plain = train::make_language_model(g.lm);
    if (g.lora.rank > 0) nn::apply_lora(*plain.net, g.lora);  // the gathered adapters' places
    plain.net->to(setup.device);
    plain.net->load_state_dict(sd);
    return finish(plain);
  }
  parallel.with_whole_model([&] {  // ZeRO-3: the model gathered (a collective)
    if (setup.main()) finish(lm);
  });
}

// Each residual add into the next layer norm, bias + GELU into the MLP's product (nn/fuse.h); not
// under --tp or --pp, which split and cut the plain blocks.
void fuse_unless_split(nn::Module& model, const train::TrainConfig& cfg,
                       const train::RunSetup& setup) {
  if (cfg.tp > 1 || cfg.pp > 1) return;
  const auto fused = nn::fuse(model);
  if (setup.main()) std::printf("%s\n", nn::fusion_summary(fused).c_str());
}

// --plan-only: the memory table for the model's preset (its own vocabulary unless --vocab-size),
// T = --seq-len, on an H200's 139 GiB.
int print_memory_plan(const CLI::App& app, GptFlags& g) {
  g.lm.vocab_size = app.count("--vocab-size") ? g.data.vocab_size : 0;
  g.lm.seq_len = g.data.seq_len;
  return train::run_main("train_gpt", [&] {
    std::printf("%s",
                distributed::memory_table(train::model_shape(g.lm), g.plan_gpus, g.plan_micro_batch,
                                          g.data.seq_len, g.activation_checkpointing, 139.0)
                    .c_str());
    return 0;
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a GPT on a text with loom"};
  train::TrainConfig cfg;
  cfg.optimizer = "adamw", cfg.lr = 1e-3, cfg.weight_decay = 0.1, cfg.batch_size = 16,
  cfg.epochs = 1, cfg.max_steps = 1000, cfg.log_every = 10;
  GptFlags g;
  train::add_train_flags(app, cfg);
  add_gpt_flags(app, g);
  add_lora_flags(app, g.lora);
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;
  if (g.plan_only) return print_memory_plan(app, g);

  return train::run_main("train_gpt", [&] {
    auto tokenizer = load_run_tokenizer(app, g);
    manual_seed(cfg.seed);
    train::LanguageModel lm = train::make_language_model(g.lm);  // GPT-2's or Llama's
    std::shared_ptr<nn::CausalLM> model = lm.net;
    if (g.lora.rank > 0) nn::apply_lora(*model, g.lora);  // before DDP: adapters train, base frozen
    lm.set_activation_checkpointing(g.activation_checkpointing);
    train::RunSetup setup(cfg);
    fuse_unless_split(*model, cfg, setup);
    train::convert_for_amp(*model, cfg, setup.main());  // --amp fp8: FP8 Linears (docs/fp8.md)
    train::TokenData data(cfg, setup, g.data);  // windows (B, T) of token ids, sharded by rank
    model->to(setup.device);
    // DDP, ZeRO / FSDP with --zero, the blocks split with --tp (docs/parallelism.md); AdamW over
    // the trainable parameters of what is left on this rank.
    auto parallel =
        distributed::parallelize(model, train::parallel_plan(cfg), setup.pg, [&](nn::Module& m) {
          return train::make_transformer_adamw(
              cfg, g.lora.rank > 0 ? nn::lora_parameters(m) : m.parameters());
        });
    nn::Module& net = parallel->train_module();
    optim::Optimizer& opt = parallel->optimizer();  // ZeRO's under --zero, else the AdamW
    const int64_t total = train::total_steps(cfg, *data.train);
    optim::CosineWithWarmup sched(opt, {.warmup_steps = std::min(g.warmup, total - 1),
                                        .total_steps = total,
                                        .eta_min = cfg.lr * g.min_lr_ratio});
    std::optional<DType> amp_dtype = train::autocast_dtype(cfg);  // docs/amp.md
    amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});       // loss scaling for float16
    train::Run run(cfg, setup, {*parallel, *data.train, scaler, &sched},
                   run_plan(lm, g, cfg, data.train_set->num_tokens()));

    // One training step, as a PyTorch program writes it; --grad-accum and --cuda-graph wrap it
    // (train::accumulate, train::CudaGraphStep), as in examples/train_mlp.cpp.
    auto forward_backward = [&](const train::MicroBatch& mb) {  // mb.x, mb.y: (b, T) token ids
      amp::Autocast autocast(amp_dtype);  // --amp bf16 (and fp8): the matrix products in bf16
      Tensor loss = mb.share(net.loss(mb.x, mb.y));  // forward, head and cross-entropy as one op
      mb.forward_done();
      scaler.scale(loss).backward();
      return loss.detach();
    };
    train::CudaGraphStep step(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = parallel->pipelined()  // --pp: the stages' schedule runs the micro-batches
                            ? parallel->forward_backward(x, y, cfg.grad_accum, amp_dtype, &scaler)
                            : train::accumulate(x, y, run.accumulation(), forward_backward);
          scaler.unscale_(opt);  // fp16: the true gradients, for the clip
          if (g.grad_clip > 0) opt.clip_grad_norm_in_step(g.grad_clip);  // in AdamW's update
          scaler.step(opt);
          scaler.update();
          return loss;
        },
        cfg.cuda_graph, opt, parallel.get(), cfg.grad_accum);

    while (run.next_interval()) {  // --eval-every steps
      while (auto batch = run.next_batch()) {
        Tensor loss = step(batch->data, batch->target);  // x, y: (B/N, T) int64
        sched.step();
        if (!run.after_step(loss)) break;
      }
      if (!run.end_interval()) break;
      if (!run.evaluated(train::evaluate_classifier(*parallel, *data.val, setup))) break;
    }
    after_training(lm, *parallel, g, setup, *tokenizer, cfg.tp > 1 || cfg.pp > 1);
    return run.finish();
  });
}
