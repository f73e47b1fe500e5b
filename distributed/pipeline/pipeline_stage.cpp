// PipelineStage (distributed/pipeline/pipeline_stage.h, Note [Pipeline stages]): where a GPT or a
// Llama is cut, and each stage's forward, loss and parameters. Leaves out: the schedules.
#include "distributed/pipeline/pipeline_stage.h"

#include <unordered_set>

#include "autograd/ops/ops.h"
#include "distributed/tensor_parallel/sequence_parallel.h"
#include "distributed/tensor_parallel/tp_regions.h"
#include "nn/gpt.h"
#include "nn/llama.h"

namespace loom::distributed {

PipelineStage::PipelineStage(nn::Module& model, int stage, int stages)
    : stage_(stage), stages_(stages) {
  if (auto* g = dynamic_cast<nn::GPT*>(&model)) {
    embed_ = [g](const Tensor& idx) { return g->embed(idx, 0); };
    blocks_ = g->h.get(), final_norm_ = g->ln_f.get(), head_weight_ = g->lm_head->weight;
    head_ = g->lm_head.get();
    embedding_ = g, tied_ = true;  // the first stage lists wte and wpe (see parameters())
  } else if (auto* l = dynamic_cast<nn::Llama*>(&model)) {
    embed_ = [l](const Tensor& idx) { return l->embed(idx, 0); };
    blocks_ = l->layers.get(), final_norm_ = l->norm.get(), head_weight_ = l->lm_head->weight;
    head_ = l->lm_head.get();
    embedding_ = l->embed_tokens.get(), tied_ = l->config.tie_embeddings;
  } else {
    LOOM_FAIL("PipelineStage: cuts GPT and Llama models, not ", model.type_name());
  }
  const int64_t L = int64_t(blocks_->size());
  LOOM_CHECK(stages >= 1 && stage >= 0 && stage < stages, "PipelineStage: stage ", stage, " of ",
             stages);
  LOOM_CHECK(stages <= L && L % stages == 0, "pipeline parallel: pp ", stages,
             " does not divide the ", L, " blocks of ", model.type_name(),
             " (each stage takes L / pp of them)");
  begin_ = stage * L / stages, end_ = (stage + 1) * L / stages;
  // The stage runs the blocks one by one, so it splits and gathers along T itself.
  sp_ = dynamic_cast<SequenceParallelStack*>(blocks_);
  if (sp_) {
    std::unordered_set<const TensorImpl*> mine;
    for (const Tensor& p : held()) mine.insert(p.impl());
    for (const Tensor& p : sequence_parallel_parameters(model))
      if (mine.count(p.impl())) sp_params_.push_back(p);
  }
}

Tensor PipelineStage::forward(const Tensor& in) {
  Tensor h = is_first() ? embed_(in) : in;  // (b, T, C); under sequence parallel (b, T / tp, C)
  if (sp_ && is_first()) h = split_sequence(h, *sp_->tp);  // this rank's positions
  for (int64_t i = begin_; i < end_; ++i) h = (*blocks_->block(size_t(i)))(h);
  if (sp_ && is_last()) h = gather_sequence(h, *sp_->tp);  // (b, T, C) on every tp rank
  return is_last() ? (*final_norm_)(h) : h;
}

Tensor PipelineStage::loss(const Tensor& hidden, const Tensor& targets) {
  LOOM_CHECK(is_last(), "PipelineStage::loss: stage ", stage_, " of ", stages_,
             " is not the last; only the last stage has the head");
  return linear_cross_entropy(hidden, head_weight_, targets, Reduction::Mean, 0.0, -1);
}

Tensor PipelineStage::logits(const Tensor& hidden) {
  LOOM_CHECK(is_last(), "PipelineStage::logits: stage ", stage_, " of ", stages_,
             " is not the last; only the last stage has the head");
  return (*head_)(hidden);
}

std::vector<Tensor> PipelineStage::parameters() const { return listed(true); }

std::vector<Tensor> PipelineStage::held() const { return listed(false); }

std::vector<Tensor> PipelineStage::listed(bool trainable_only) const {
  std::vector<Tensor> out;
  auto add = [&out, trainable_only](const nn::Module& m) {
    for (const Tensor& p : m.parameters())
      if (p.requires_grad() || !trainable_only) out.push_back(p);
  };
  if (is_first()) {
    if (auto* g = dynamic_cast<const nn::GPT*>(embedding_))
      add(*g->wte), add(*g->wpe);
    else
      add(*embedding_);
  }
  for (int64_t i = begin_; i < end_; ++i) add(*blocks_->block(size_t(i)));
  if (is_last()) {
    add(*final_norm_);
    const bool head_listed = tied_ && is_first();  // one stage: the embedding's matrix is listed
    if (!head_listed) out.push_back(head_weight_);
  }
  return out;
}

int64_t PipelineStage::hidden_size() const { return head_weight_.size(1); }

int64_t PipelineStage::boundary_length(int64_t T) const {
  return sp_ ? T / sp_->tp->size() : T;  // split_sequence refuses a T that tp does not divide
}

void PipelineStage::sync_sequence_parallel_grads() {
  if (sp_) distributed::sync_sequence_parallel_grads(sp_params_, *sp_->tp);
}

std::vector<std::unique_ptr<PipelineStage>> rank_chunks(nn::Module& model, int rank, int stages,
                                                        int virtual_stages) {
  std::vector<std::unique_ptr<PipelineStage>> out;
  const int V = virtual_stages, C = stages * V;
  if (V > 1) {
    const int64_t L = PipelineStage(model, 0, 1).end_block();
    LOOM_CHECK(L % C == 0, "pipeline parallel: --pp ", stages, " x --pp-virtual-stages ", V, " = ",
               C, " chunks do not divide the ", L, " blocks of ", model.type_name(),
               " (each chunk takes L / (pp V) of them)");
  }
  LOOM_CHECK(V >= 1, "pipeline parallel: --pp-virtual-stages ", V);
  for (int v = 0; v < V; ++v)
    out.push_back(std::make_unique<PipelineStage>(model, v * stages + rank, C));
  return out;
}

}  // namespace loom::distributed
