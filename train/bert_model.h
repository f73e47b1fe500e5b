// BertTask: the BERT a train_bert run trains, behind what the run needs of it: the model taking
// one tensor of rows (B, 3, T) (input ids, token types, attention mask: what data/mlm.h's
// MlmDataset and train/bert_data.h's verses give), so that DDP, ZeRO, checkpoints and the
// evaluation see an ordinary module; the masked-language-model head (--task mlm) or the
// sequence classifier (--task testament); made from a preset ("tiny", "mini", "bert-base") or a
// Hugging Face folder (--init-from), written back as one (--save-hf); its name and FLOPs for the
// log; and the MLM validation (the loss and accuracy over the masked positions only). Used by
// examples/train_bert.cpp. Leaves out: the data (train/bert_data.h) and the training step (the
// program's).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "data/dataloader.h"
#include "distributed/parallel/parallel_model.h"
#include "nn/bert.h"
#include "train/evaluate.h"
#include "train/run_setup.h"

namespace loom::train {

// Note [BERT rows]
// A BERT batch travels as one int64 tensor (B, 3, T): row 0 the input ids, row 1 the token types,
// row 2 the attention mask (ones, then zeros on the right padding). bert_rows splits it into what
// nn::Bert::forward takes: ids (B, T'), token types (B, T') and lengths (B). With trim, T' is the
// longest row's length (one read of the lengths to the host): the padding every row has costs
// nothing; without (a captured CUDA graph needs fixed shapes), T' = T. Attention skips the
// padding either way, so the real positions get the same values.
struct BertRows {
  Tensor ids, token_types, lengths;
};
BertRows bert_rows(const Tensor& rows, bool trim);

struct BertSpec {
  std::string task = "mlm";     // mlm, or a classification task (testament)
  std::string preset = "mini";  // tiny, mini, bert-base, bert-large
  int64_t vocab_size = 0;       // the tokenizer's; a --init-from folder's must hold it
  int64_t seq_len = 128;        // the model's positions must hold it
  int64_t num_labels = 2;       // classification
  double dropout = 0.1;
  std::string init_from{};  // a Hugging Face BERT folder
  bool trim = true;         // Note [BERT rows]
};

struct BertTask {
  std::shared_ptr<nn::Module> net;  // the model over rows (Note [BERT rows])
  std::string title;                // "BERT 4x128, masked LM (1234567 parameters)"
  double flops_per_token = 0;       // training FLOPs per token at seq_len
  std::function<void(const std::string&)> save_hf;
};

// "mini" is 4 layers of width 128 (4 heads, MLP 512): train_gpt's mini, for the CPU; the others
// are nn::BertConfig::preset's. From a preset the vocabulary is the tokenizer's and the positions
// at least seq_len. Errors name the flag: an unknown --model, a --init-from folder that is not a
// Hugging Face BERT (the folder's own error follows), one whose vocabulary or positions are too
// small.
BertTask make_bert_task(const BertSpec& spec);

// The validation of a masked LM: the mean cross-entropy and the accuracy of the most likely token
// over every masked position (labels not -100) of the loader, summed over the ranks (Note
// [Sharded evaluation] in train/evaluate.h). Not under ZeRO-3 with unequal shards.
Evaluation evaluate_masked_lm(distributed::ParallelModel& model, data::DataLoader& loader,
                              const RunSetup& setup);

}  // namespace loom::train
