// train_gpt: trains a GPT (nn/gpt.h) on a text, next-token prediction, on the GPU if there is one,
// else on the CPU; prints train and validation loss, tokens/s and MFU; checkpoints with exact
// resume, TensorBoard, --amp bf16, --cuda-graph, --grad-accum, and unchanged under loomrun with
// DDP. --sample N then prints N tokens of text generated from --prompt (with a KV cache:
// nn/gpt_sample.h).
//
//   ./build/examples/train_gpt --text $(scripts/gpt-corpus.sh)   # the KJV Bible, the "mini" model
//   ./build/examples/train_gpt --text book.txt --max-steps 2000 --sample 300 --prompt "And "
//   ./build/examples/train_gpt --shards data/ --vocab-size 50257 --model d12 --seq-len 1024
//       --batch-size 16 --amp bf16                      # (one line) llm.c / nanoGPT .bin shards
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_gpt
//
// The loop is in main below: steps -> the loss window -> every --eval-every steps the
// validation loss and a summary line -> checkpoints. The parts it calls live in train/
// (run_setup, token_data, checkpointing, loss_window, evaluate, run_log, step_runner).
#include <cstdio>
#include <filesystem>

#include "autograd/ops/ops.h"
#include "data/byte_tokenizer.h"
#include "distributed/ddp/ddp.h"
#include "nn/amp/grad_scaler.h"
#include "nn/gpt_sample.h"
#include "nn/optim/lr_scheduler.h"
#include "train/checkpointing.h"
#include "train/data_parallel.h"
#include "train/evaluate.h"
#include "train/loss_window.h"
#include "train/make_optimizer.h"
#include "train/run_log.h"
#include "train/token_data.h"
#include "train/train_flags.h"

using namespace loom;

namespace {

struct GptFlags {
  std::string model = "mini";                   // mini (4 x 128), or GPT-2's d12, d24, d36, d48
  int64_t n_layer = 0, n_head = 0, n_embd = 0;  // override the preset's (0: keep)
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
};

void add_gpt_flags(CLI::App& app, GptFlags& g) {
  app.add_option("--model", g.model, "mini, or GPT-2's sizes d12 (124M), d24, d36, d48")
      ->check(CLI::IsMember({"mini", "d12", "d24", "d36", "d48"}));
  app.add_option("--n-layer", g.n_layer, "blocks (0: the model's)")
      ->check(train::int_range(0, 1024));
  app.add_option("--n-head", g.n_head, "attention heads (0: the model's)")
      ->check(train::int_range(0, 1024));
  app.add_option("--n-embd", g.n_embd, "width (0: the model's)")->check(train::int_range(0, 65536));
  app.add_option("--text", g.data.text, "a UTF-8 text file to train on (bytes are the tokens)");
  app.add_option("--shards", g.data.shards, "or a folder of train_*.bin / val_*.bin token shards");
  app.add_option("--vocab-size", g.data.vocab_size, "256 for --text; 50257 for GPT-2 shards")
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
  app.add_flag("--activation-checkpointing", g.activation_checkpointing,
               "keep only each block's input in forward and recompute the block in backward "
               "(less memory, one more forward)");
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

nn::GPTConfig model_config(const GptFlags& g) {
  nn::GPTConfig c = g.model == "mini" ? nn::GPTConfig{.n_layer = 4, .n_head = 4, .n_embd = 128}
                                      : nn::GPTConfig::gpt2(g.model);
  if (g.n_layer) c.n_layer = g.n_layer;
  if (g.n_head) c.n_head = g.n_head;
  if (g.n_embd) c.n_embd = g.n_embd;
  c.vocab_size = g.data.vocab_size;
  c.block_size = g.data.seq_len;  // the position table: as long as the training windows
  return c;
}

// --sample: N tokens after --prompt, decoded as bytes when the vocabulary is bytes.
void print_sample(nn::GPT& model, const GptFlags& g) {
  nn::SampleOptions o = g.sampling;
  data::ByteTokenizer bytes;
  auto prompt = bytes.encode(g.prompt);
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  o.max_new_tokens = std::min<int64_t>(g.sample, model.config.block_size - int64_t(ids.size()));
  std::vector<int64_t> out = nn::generate(model, ids, o);
  std::vector<uint16_t> tokens(out.begin(), out.end());
  std::string text = model.config.vocab_size == 256 ? bytes.decode(tokens) : "(token ids)";
  std::printf("--- sample (%zu tokens, temperature %g, top-k %ld) ---\n%s%s\n---\n", out.size(),
              o.temperature, long(o.top_k), g.prompt.c_str(), text.c_str());
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
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return train::run_main("train_gpt", [&] {
    manual_seed(cfg.seed);
    auto model = std::make_shared<nn::GPT>(model_config(g));
    model->set_activation_checkpointing(g.activation_checkpointing);
    train::RunSetup run(cfg);
    train::TokenData data(cfg, run, g.data);  // windows (B, T) of token ids, sharded by rank
    data::DataLoader& loader = *data.train;
    model->to(run.device);
    auto opt = train::make_transformer_adamw(cfg, model->parameters());
    int64_t total = cfg.max_steps > 0 ? cfg.max_steps : cfg.epochs * loader.size();
    cfg.epochs =
        std::max(cfg.epochs, (total + loader.size() - 1) / loader.size());  // --max-steps rules
    // DDP (or ZeRO with --zero) before the Checkpointer, which must restore the sharded state.
    train::DataParallel dp(cfg, run, model, *opt);
    optim::Optimizer& opt_run = dp.optimizer();  // the ZeroOptimizer under --zero, else *opt
    optim::CosineWithWarmup sched(opt_run, {.warmup_steps = std::min(g.warmup, total - 1),
                                            .total_steps = total,
                                            .eta_min = cfg.lr * g.min_lr_ratio});
    std::optional<DType> amp_dtype;
    if (cfg.amp != "off") amp_dtype = cfg.amp == "bf16" ? DType::BF16 : DType::F16;
    amp::GradScaler scaler(amp::GradScalerOptions{.enabled = cfg.amp == "fp16"});
    train::Checkpointer ckpt(cfg, run, {*model, opt_run, scaler, loader, &sched, dp.fsdp()});
    int64_t step = ckpt.resume();
    nn::Module& net = dp.net();
    train::RunLog log(cfg, run);
    log.start(str("GPT ", model->config.n_layer, "x", model->config.n_embd, " (",
                  model->num_parameters(), " parameters)"),
              data.train_set->num_tokens());
    train::LossWindow window(cfg, run);
    train::StepRunner runner(net, opt_run, 0.0, cfg.cuda_graph);
    train::MemoryProbe memory(run.device);  // each rank's bytes, printed after the first step
    bool memory_reported = false;
    runner.set_amp(amp_dtype, scaler.is_enabled() ? &scaler : nullptr);
    runner.set_grad_clip(g.grad_clip);
    runner.set_grad_accum(cfg.grad_accum);  // micro-batches of (B/N/K, T), one update per step
    const int64_t tokens_per_step = cfg.batch_size * g.data.seq_len;
    const double flops_per_step = model->flops_per_token(g.data.seq_len) * double(tokens_per_step);

    // The loop: intervals of --eval-every steps, each ending with the validation loss.
    while (step < total && !window.stop_signal()) {
      int64_t n = std::min(g.eval_every, total - step);
      train::EpochProgress progress(step / g.eval_every + 1,
                                    (total + g.eval_every - 1) / g.eval_every, n,
                                    run.progress_options());
      for (int64_t i = 0; i < n; ++i) {
        auto batch = train::next_batch(loader, nullptr);
        if (!batch) batch = train::next_batch(loader, nullptr);  // the next epoch's first
        Tensor loss = runner.step(batch->data, batch->target);   // x, y: (B/N, T) int64
        if (!memory_reported) {
          memory.report(run, *model, dp);
          memory_reported = true;
        }
        sched.step();
        ++step;
        if (auto mean = window.add(loss, step, i + 1 == n, progress, tokens_per_step))
          log.scalar("train/loss", *mean, step);
        if (window.stop_signal()) break;
        if (ckpt.due(step)) ckpt.save_here(step);
      }
      progress.finish();
      if (int sig = window.stop_signal()) {
        log.stopped(sig, str("step ", step), ckpt.save_here(step));
        break;
      }
      auto val = train::evaluate_classifier(dp.eval_net(), *data.val, *run.pg, run.device);
      double tok_s = progress.samples_per_second();
      if (run.main())
        std::printf(
            "step %ld | train loss %.4f | val loss %.4f | %.0f tok/s | %.2f ms/step | "
            "MFU %.1f%% | lr %.3g\n",
            long(step), progress.mean_loss(), val.loss, tok_s, progress.ms_per_step(),
            100.0 * tok_s * flops_per_step / double(tokens_per_step) / (g.peak_tflops * 1e12),
            opt->lr());
      log.validated(val);
      log.scalar("val/loss", val.loss, step);
      log.scalar("train/tokens_per_second", tok_s, step);
      ckpt.save_here(step);
    }
    if (g.sample > 0) {
      auto whole = dp.fsdp() ? dp.fsdp()->full_params() : nullptr;  // ZeRO-3: a collective
      if (run.main()) print_sample(*model, g);
    }
    return log.finish(step, nullptr);
  });
}
