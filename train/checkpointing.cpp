// Resume and save for training runs. See checkpointing.h.
#include "train/checkpointing.h"

#include <cstdio>
#include <map>

#include "core/error.h"
#include "core/generator.h"

namespace loom::train {

void check_resume_state(const TrainingState& st, const nn::StateDict& model_sd,
                        int64_t steps_per_epoch, int64_t epoch_size, const TrainConfig& cfg) {
  const std::string where = "checkpoint '" + st.source + "'";
  int64_t epoch = st.extra_int("epoch"), step = st.extra_int("step"),
          position = st.extra_int("position");
  LOOM_CHECK(epoch >= 0 && step >= 0 && position >= 0, where, ": negative counters (epoch ", epoch,
             ", step ", step, ", position ", position, ")");
  LOOM_CHECK(epoch <= cfg.epochs, where, ": epoch ", epoch, " is beyond this run's --epochs ",
             cfg.epochs);
  LOOM_CHECK(epoch < cfg.epochs, where, ": the run is complete (", epoch, " of --epochs ",
             cfg.epochs, " epochs done): nothing to train; raise --epochs to train further");
  LOOM_CHECK(cfg.max_steps == 0 || step < cfg.max_steps, where, ": step ", step,
             " is not below --max-steps ", cfg.max_steps, ": nothing to train");
  LOOM_CHECK(position <= epoch_size, where, ": sampler position ", position,
             " is beyond the epoch of ", epoch_size,
             " examples (saved with another dataset or --train-limit?)");
  LOOM_CHECK(step <= (epoch + 1) * steps_per_epoch, where, ": step ", step,
             " is beyond what epoch ", epoch + 1, " can reach (", steps_per_epoch,
             " steps per epoch; saved with another --batch-size?)");
  std::map<std::string, DType> want;
  for (const auto& [name, t] : model_sd) want[name] = t.dtype();
  for (const auto& [name, t] : st.model) {
    auto it = want.find(name);
    LOOM_CHECK(it == want.end() || it->second == t.dtype(), where, ": model tensor '", name,
               "' is ", dtype_name(t.dtype()), " but the model's is ", dtype_name(it->second));
  }
}

Checkpointer::Checkpointer(const TrainConfig& cfg, const RunSetup& run, RunState state)
    : cfg_(cfg), run_(run), s_(state) {}

int64_t Checkpointer::resume() {
  if (!cfg_.resume) return 0;
  std::optional<TrainingState> st = load_latest_checkpoint(cfg_.checkpoint_dir);
  if (!st) {
    LOOM_CHECK(list_checkpoints(cfg_.checkpoint_dir).empty(), "--resume: no checkpoint in '",
               cfg_.checkpoint_dir,
               "' is valid (each was skipped above, with the reason); move them away to start a "
               "new run");
    if (run_.main())
      std::printf("no checkpoint in %s yet: starting a new run\n", cfg_.checkpoint_dir.c_str());
    return 0;
  }
  s_.model.load_model_state_dict(st->model, [&](const nn::StateDict& mine) {
    check_resume_state(*st, mine, s_.loader.size(), s_.loader.dataset().size(), cfg_);
  });
  restore_default_rng(*st);
  const int64_t step = st->extra_int("step");
  if (st->extra.count("global_batch"))
    LOOM_CHECK(st->extra_int("global_batch") == cfg_.batch_size, "--resume: ", st->source,
               " was written with a global batch of ", st->extra_int("global_batch"),
               ", this run has --batch-size ", cfg_.batch_size,
               "; keep the global batch to continue the same run");
  const int replicas = run_.replicas;            // the processes that read different data
  int64_t position = st->extra_int("position");  // global samples done in the epoch
  LOOM_CHECK(position % replicas == 0, "--resume: ", st->source, " stopped at sample ", position,
             " of its epoch, which ", replicas, " data-parallel replicas cannot split evenly");
  s_.loader.load_state({st->extra_int("epoch"), position / replicas});
  if (run_.main())
    std::printf("resumed from %s (epoch %ld, step %ld, written by %ld process(es), now %d)\n",
                st->source.c_str(), long(st->extra_int("epoch") + 1), long(step),
                long(st->extra.count("world_size") ? st->extra_int("world_size") : 1), run_.world);
  s_.model.load_optimizer_state_dict(st->optimizer);
  // A checkpoint written without a scaler (an older one, or another --amp) leaves it new.
  if (s_.scaler.is_enabled() && !st->scaler.empty()) s_.scaler.load_state_dict(st->scaler);
  if (s_.scheduler) s_.scheduler->set_last_epoch(st->extra_int("scheduler_step"));
  return step;
}

std::string Checkpointer::save(int64_t epoch, int64_t global_position, int64_t step) {
  if (cfg_.checkpoint_dir.empty()) return "";
  std::string path;
  // The whole layout: collectives (gathers) under ZeRO, FSDP and tensor parallel; every rank.
  nn::StateDict model = s_.model.model_state_dict();
  nn::StateDict optimizer = s_.model.optimizer_state_dict();
  if (run_.main()) {
    TrainingState st;
    st.model = std::move(model);
    st.optimizer = std::move(optimizer);
    if (s_.scaler.is_enabled()) st.scaler = s_.scaler.state_dict();
    st.set_extra("epoch", epoch);
    st.set_extra("position", global_position);
    st.set_extra("step", step);
    st.set_extra("world_size", run_.world);
    st.set_extra("global_batch", cfg_.batch_size);
    if (s_.scheduler) st.set_extra("scheduler_step", s_.scheduler->last_epoch());
    st.rng["default"] = default_generator().state();
    path = save_checkpoint(cfg_.checkpoint_dir, step, st, cfg_.keep_last);
  }
  if (run_.world > 1) run_.pg->barrier()->wait();  // nobody reads or overwrites it before
  return path;
}

std::string Checkpointer::save_here(int64_t step) {
  return save(s_.loader.epoch(), s_.loader.state().position * run_.replicas, step);
}

bool Checkpointer::due(int64_t step) const {
  return cfg_.checkpoint_every > 0 && step % cfg_.checkpoint_every == 0 &&
         s_.loader.batches_left() > 0;
}

}  // namespace loom::train
