// train_bert: BERT on a text, two tasks. --task mlm pretrains a BertForMaskedLM: the text packed
// into examples of --seq-len WordPiece tokens, 15% of them masked anew each epoch, reporting the
// train and validation MLM loss and the masked-token accuracy. --task testament fine-tunes a
// BertForSequenceClassification on the KJV's verses labelled Old or New Testament (every tenth
// verse held out), then trains a bag-of-words baseline (train/bag_of_words.h) on the same split
// and prints both validation accuracies. On the GPU if there is one, else the CPU; checkpoints
// with exact resume, TensorBoard, --amp bf16/fp16, --grad-accum, --cuda-graph, Hugging Face BERT
// folders in and out (--init-from, --save-hf), unchanged under loomrun with DDP or ZeRO.
//
//   ./build/examples/train_bert --task mlm --text $(scripts/gpt-corpus.sh) --save-hf bert-kjv/
//   ./build/examples/train_bert --task testament --text kjv.txt --init-from bert-kjv/
//   ./build/distributed/launcher/loomrun --nproc_per_node=2 ./build/examples/train_bert ...
//
// main below shows the training step (zero_grad, forward and loss, backward, clip, AdamW's step)
// and the loop: intervals of --eval-every steps, each ending with the validation. train::Run
// (train/run.h) keeps the books around them: loss window, log, checkpoints, signals.
#include <cstdio>
#include <memory>

#include "autograd/amp/autocast.h"
#include "autograd/ops/ops.h"
#include "data/tokenizer.h"
#include "data/wordpiece.h"
#include "distributed/parallel/parallelize.h"
#include "nn/amp/grad_scaler.h"
#include "nn/optim/lr_scheduler.h"
#include "train/bag_of_words.h"
#include "train/bert_data.h"
#include "train/bert_model.h"
#include "train/cuda_graph_step.h"
#include "train/flags.h"
#include "train/make_optimizer.h"
#include "train/run.h"

#ifndef LOOM_KJV_WORDPIECE
#define LOOM_KJV_WORDPIECE "tests/data/tokenizers/kjv_wordpiece.json"
#endif

using namespace loom;

namespace {

struct BertFlags {
  train::BertSpec model;  // --task, --model, --init-from, --dropout
  train::BertDataConfig data;
  std::string tokenizer = LOOM_KJV_WORDPIECE;  // a WordPiece tokenizer.json or vocab.txt
  int64_t eval_every = 100;
  int64_t warmup = 100;
  double min_lr_ratio = 0.1;  // the cosine schedule ends at lr * this
  double grad_clip = 1.0;
  double peak_tflops = 989.0;  // H100/H200 dense bf16, for the MFU column
  std::string save_hf;         // a Hugging Face folder written after training
  train::BagOfWordsOptions baseline;
};

void add_bert_flags(CLI::App& app, BertFlags& b) {
  app.add_option("--task", b.model.task,
                 "mlm: masked-language-model pretraining; testament: classify each KJV verse as "
                 "Old or New Testament (fine-tuning), beside a bag-of-words baseline")
      ->check(CLI::IsMember({"mlm", "testament"}));
  app.add_option("--model", b.model.preset,
                 "tiny (2x32), mini (4x128), bert-base, bert-large (ignored with --init-from)")
      ->check(CLI::IsMember({"tiny", "mini", "bert-base", "bert-large"}));
  app.add_option("--text", b.data.text,
                 "the UTF-8 text: the KJV as scripts/gpt-corpus.sh writes it (testament needs "
                 "it), or any text of blank-line separated paragraphs (mlm)");
  app.add_option("--tokenizer", b.tokenizer,
                 "a WordPiece tokenizer.json or vocab.txt (data/tokenizer.h); the default is the "
                 "KJV vocabulary of 3000 tokens in tests/data/tokenizers/");
  app.add_option("--seq-len", b.data.seq_len, "tokens per example, [CLS] and [SEP] included")
      ->check(train::int_range(8, 1 << 16));
  app.add_option("--val-fraction", b.data.val_fraction,
                 "held out for validation: the last chapters (mlm), every k-th verse (testament)")
      ->check(train::real_range(0.01, 0.5));
  app.add_option("--eval-examples", b.data.val_examples,
                 "validation examples per evaluation (0: all)")
      ->check(train::int_range(0, int64_t(1) << 40));
  app.add_option("--eval-every", b.eval_every, "steps between evaluations")
      ->check(train::int_range(1, 1 << 30));
  app.add_option("--warmup", b.warmup, "linear warm-up steps")->check(train::int_range(0, 1 << 30));
  app.add_option("--min-lr-ratio", b.min_lr_ratio, "the cosine schedule's last lr / --lr")
      ->check(train::real_range(0, 1));
  app.add_option("--grad-clip", b.grad_clip, "clip the global gradient norm (0: off)")
      ->check(train::real_range(0, 1e6));
  app.add_option("--dropout", b.model.dropout, "hidden, attention and classifier dropout")
      ->check(train::real_range(0, 0.9));
  app.add_option("--init-from", b.model.init_from,
                 "start from a Hugging Face BERT folder (--save-hf's, or transformers'): its "
                 "sizes and weights; testament starts a new classifier head on its encoder");
  app.add_option("--save-hf", b.save_hf,
                 "after training, write the model as a Hugging Face folder here");
  app.add_option("--baseline-epochs", b.baseline.epochs,
                 "testament: epochs of the bag-of-words baseline (0: none)")
      ->check(train::int_range(0, 1000));
  app.add_option("--baseline-lr", b.baseline.lr, "testament: the baseline's AdamW learning rate")
      ->check(train::real_range(0, 10, true));
  app.add_option("--peak-tflops", b.peak_tflops, "the device's peak, for MFU")
      ->check(train::real_range(0, 1e6, true));
}

// --tokenizer: loaded; BERT needs a WordPiece one ([CLS], [SEP], [MASK], [PAD]).
std::shared_ptr<const data::WordPieceTokenizer> load_wordpiece(const std::string& spec) {
  std::shared_ptr<const data::Tokenizer> tok = data::load_tokenizer(spec);
  auto wp = std::dynamic_pointer_cast<const data::WordPieceTokenizer>(tok);
  LOOM_CHECK(wp != nullptr, "--tokenizer ", spec, " is ", tok->name(),
             ", not a WordPiece tokenizer: BERT reads WordPiece ids with [CLS], [SEP] and "
             "[MASK] (a tokenizer.json of model.type \"WordPiece\", or a vocab.txt)");
  return wp;
}

// How the run is reported: the model's name, its data in tokens (mlm) or verses (testament), MFU's
// FLOPs and peak.
train::RunPlan run_plan(const train::BertTask& bert, const BertFlags& b,
                        const train::TrainConfig& cfg, int64_t train_examples) {
  const int64_t tokens_per_step = cfg.batch_size * b.data.seq_len;
  const bool mlm = b.model.task == "mlm";
  return {.title = bert.title,
          .train_examples = train_examples,
          .unit = mlm ? "tokens" : "examples",
          .eval_every = b.eval_every,
          .samples_per_step = mlm ? tokens_per_step : cfg.batch_size,
          .flops_per_step = bert.flops_per_token * double(tokens_per_step),
          .peak_tflops = b.peak_tflops,
          .accuracy_name = mlm ? "masked-token accuracy" : "accuracy"};
}

// The data of --task: the packed and masked text, or the labelled verses.
struct TaskData {
  std::unique_ptr<train::MlmData> mlm;
  std::unique_ptr<train::TestamentData> testament;
  data::DataLoader& train() { return mlm ? *mlm->train : *testament->train; }
  data::DataLoader& val() { return mlm ? *mlm->val : *testament->val; }
  // For the opening line: the training tokens (mlm) or verses (testament).
  int64_t train_examples() const { return mlm ? mlm->train_tokens : testament->train_set->size(); }
};

TaskData load_task_data(const train::TrainConfig& cfg, const train::RunSetup& setup,
                        const BertFlags& b) {
  TaskData d;
  if (b.model.task == "mlm")
    d.mlm = std::make_unique<train::MlmData>(cfg, setup, b.data);
  else
    d.testament = std::make_unique<train::TestamentData>(cfg, setup, b.data);
  return d;
}

// testament: the bag-of-words baseline on the same split, printed beside BERT's accuracy.
void report_baseline(const TaskData& d, BertFlags& b, const train::RunSetup& setup,
                     const train::Evaluation& bert, uint64_t seed) {
  if (!d.testament) return;
  const train::TestamentData& t = *d.testament;
  double bow = -1;
  if (b.baseline.epochs > 0) {
    b.baseline.vocab_size = b.model.vocab_size, b.baseline.seed = seed;
    b.baseline.num_labels = train::TestamentData::kNumLabels, b.baseline.device = setup.device;
    bow = train::train_bag_of_words(*t.train_set, *t.val_set, b.baseline).val_accuracy;
  }
  if (!setup.main()) return;
  if (bow < 0)
    std::printf(
        "validation accuracy: bert %.4f, majority class %.4f (no baseline: "
        "--baseline-epochs 0)\n",
        bert.accuracy, t.majority_rate);
  else
    std::printf("validation accuracy: bert %.4f, bag-of-words %.4f, majority class %.4f\n",
                bert.accuracy, bow, t.majority_rate);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Pretrain or fine-tune a BERT on a text with loom"};
  train::TrainConfig cfg;
  cfg.optimizer = "adamw", cfg.lr = 1e-3, cfg.weight_decay = 0.01, cfg.batch_size = 32,
  cfg.epochs = 1, cfg.max_steps = 1000, cfg.log_every = 10;
  BertFlags b;
  train::add_train_flags(app, cfg);
  add_bert_flags(app, b);
  if (int rc = train::parse_flags(app, argc, argv); rc >= 0) return rc;

  return train::run_main("train_bert", [&] {
    b.data.tokenizer = load_wordpiece(b.tokenizer);
    b.model.vocab_size = b.data.tokenizer->vocab_size(), b.model.seq_len = b.data.seq_len;
    b.model.num_labels = train::TestamentData::kNumLabels;
    b.model.trim = !cfg.cuda_graph;  // Note [BERT rows]: a graph replays fixed shapes
    manual_seed(cfg.seed);
    train::BertTask bert = train::make_bert_task(b.model);  // the masked LM or the classifier
    std::shared_ptr<nn::Module> model = bert.net;
    train::RunSetup setup(cfg);
    TaskData data = load_task_data(cfg, setup, b);      // (B, 3, T) rows, sharded by rank
    train::convert_for_amp(*model, cfg, setup.main());  // --amp fp8: FP8 Linears (docs/fp8.md)
    model->to(setup.device);
    auto parallel =  // DDP, or ZeRO / FSDP with --zero (docs/parallelism.md)
        distributed::parallelize(model, train::parallel_plan(cfg), setup.pg, [&](nn::Module& m) {
          return train::make_transformer_adamw(cfg, m.parameters());
        });
    nn::Module& net = parallel->train_module();
    optim::Optimizer& opt = parallel->optimizer();
    const int64_t total = train::total_steps(cfg, data.train());
    optim::CosineWithWarmup sched(opt, {.warmup_steps = std::min(b.warmup, total - 1),
                                        .total_steps = total,
                                        .eta_min = cfg.lr * b.min_lr_ratio});
    std::optional<DType> amp_dtype = train::autocast_dtype(cfg);  // docs/amp.md
    amp::GradScaler scaler({.enabled = cfg.amp == "fp16"});       // loss scaling for float16
    train::Run run(cfg, setup, {*parallel, data.train(), scaler, &sched},
                   run_plan(bert, b, cfg, data.train_examples()));
    auto evaluate = [&] {  // this rank's share of the validation set; the sums all-reduced
      return data.mlm ? train::evaluate_masked_lm(*parallel, data.val(), setup)
                      : train::evaluate_classifier(*parallel, data.val(), setup);
    };
    // One training step, as a PyTorch program writes it; --grad-accum and --cuda-graph wrap it.
    auto forward_backward = [&](const train::MicroBatch& mb) {  // mb.x (b, 3, T), mb.y labels
      amp::Autocast autocast(amp_dtype);
      Tensor loss = mb.share(net.loss(mb.x, mb.y));  // BERT forward, head, cross-entropy
      mb.forward_done();
      scaler.scale(loss).backward();
      return loss.detach();
    };
    train::CudaGraphStep step(
        [&](const Tensor& x, const Tensor& y) {
          opt.zero_grad();
          Tensor loss = train::accumulate(x, y, run.accumulation(), forward_backward);
          scaler.unscale_(opt);  // fp16: the true gradients, for the clip
          if (b.grad_clip > 0) opt.clip_grad_norm_in_step(b.grad_clip);
          scaler.step(opt);
          scaler.update();
          return loss;
        },
        cfg.cuda_graph, opt, parallel.get(), cfg.grad_accum);

    while (run.next_interval()) {  // --eval-every steps
      while (auto batch = run.next_batch()) {
        Tensor loss = step(batch->data, batch->target);  // rows (B/N, 3, T), labels
        sched.step();
        if (!run.after_step(loss)) break;
      }
      if (!run.end_interval()) break;
      if (!run.evaluated(evaluate())) break;  // prints the validation line and its accuracy
    }
    report_baseline(data, b, setup, run.last_evaluation(), cfg.seed);
    if (!b.save_hf.empty())  // ZeRO-3: the model gathered (a collective)
      parallel->with_whole_model([&] {
        if (setup.main()) bert.save_hf(b.save_hf);
      });
    return run.finish();
  });
}
