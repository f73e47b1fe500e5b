// DDPModel and FSDPModel: see distributed/parallel/data_parallel_model.h.
#include "distributed/parallel/data_parallel_model.h"

#include "core/error.h"

namespace loom::distributed {

namespace {
std::string processes(const ProcessGroup& pg) {
  return std::to_string(pg.size()) + (pg.size() == 1 ? " process" : " processes");
}

struct DDPPause : ParallelModel::Pause {
  explicit DDPPause(DistributedDataParallel& d) : guard(d) {}
  DistributedDataParallel::NoSync guard;
};
}  // namespace

// ---- DDPModel ----

DDPModel::DDPModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt,
                   std::shared_ptr<ProcessGroup> pg, int zero_stage, DDPOptions options)
    : owned_opt_(std::move(opt)), opt_(owned_opt_.get()) {
  options.reducer.zero_stage = ddp_options_for_zero(zero_stage).reducer.zero_stage;
  ddp_ = std::make_shared<DistributedDataParallel>(std::move(model), std::move(pg), options);
  if (zero_stage > 0) zero_ = std::make_unique<ZeroOptimizer>(*ddp_, *opt_);
}

DDPModel::DDPModel(std::shared_ptr<DistributedDataParallel> ddp, optim::Optimizer& opt)
    : opt_(&opt), ddp_(std::move(ddp)) {}

optim::Optimizer& DDPModel::optimizer() {
  if (zero_) return *zero_;
  return *opt_;
}

std::string DDPModel::describe() const {
  const std::string over = processes(ddp_->process_group());
  return zero_ ? "ZeRO-" + std::to_string(zero_->stage()) + " over " + over : "DDP over " + over;
}

std::unique_ptr<ParallelModel::Pause> DDPModel::no_sync() {
  return std::make_unique<DDPPause>(*ddp_);
}

void DDPModel::on_backward_computed(std::function<void()> f) {
  ddp_->reducer().set_backward_computed_hook(std::move(f));
}

void DDPModel::load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) {
  if (check) check(ddp_->module().state_dict());
  ddp_->module().load_state_dict(whole);
}

void DDPModel::check_capturable(const char* what) const { ddp_->reducer().check_capturable(what); }

ParallelModel::Memory DDPModel::memory() const {
  if (zero_) {
    auto m = zero_->memory();
    return {
        .parameters = m.parameters, .gradients = m.gradients, .optimizer_state = m.optimizer_state};
  }
  Memory m = plain_memory(ddp_->module(), *opt_);
  m.gradients = ddp_->reducer().gradient_bytes();  // .grad are views of the buckets
  return m;
}

// ---- FSDPModel ----

FSDPModel::FSDPModel(std::shared_ptr<nn::Module> model, std::unique_ptr<optim::Optimizer> opt,
                     std::shared_ptr<ProcessGroup> pg, FSDPOptions options)
    : model_(model), full_opt_(std::move(opt)) {
  fsdp_ = std::make_shared<FullyShardedDataParallel>(std::move(model), std::move(pg), options);
  zero_ = std::make_unique<ZeroOptimizer>(*fsdp_, *full_opt_);
}

std::string FSDPModel::describe() const {
  return "FSDP (ZeRO-3) over " + processes(fsdp_->process_group());
}

void FSDPModel::check_capturable(const char* what) const {
  LOOM_FAIL(what,
            ": FSDP (--zero 3) gathers and releases each unit's parameters inside the "
            "step, which a CUDA graph cannot capture; use --zero 0, 1 or 2 with it");
}

nn::StateDict FSDPModel::model_state_dict() {
  auto whole = fsdp_->full_params();  // a collective; released when it goes
  return host_copy(model_->state_dict());
}

void FSDPModel::load_model_state_dict(const nn::StateDict& whole, const StateCheck& check) {
  auto gathered = fsdp_->full_params(/*writeback=*/true);  // each rank keeps its shard of it
  if (check) check(model_->state_dict());
  model_->load_state_dict(whole);
}

void FSDPModel::with_whole_model(const std::function<void()>& f) {
  auto gathered = fsdp_->full_params(/*writeback=*/true);
  f();
}

ParallelModel::Memory FSDPModel::memory() const {
  auto m = zero_->memory();
  return {
      .parameters = m.parameters, .gradients = m.gradients, .optimizer_state = m.optimizer_state};
}

}  // namespace loom::distributed
