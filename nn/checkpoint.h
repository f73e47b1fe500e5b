// Training checkpoints: model weights, optimizer state, GradScaler state, the program's own
// counters (epoch, step, sampler position) and RNG states, in one safetensors file per save,
// written atomically, keeping the last K. Leaves out: moving tensors to a device on load (the
// caller's load_state_dict / to(device) does that) and deciding who saves (rank 0 only).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/generator.h"
#include "core/safetensors.h"

namespace loom {

// Bumped when the layout below changes; load_checkpoint refuses other versions.
constexpr int kCheckpointFormat = 2;  // 2: the CRC covers the whole file

// Note [Checkpoint layout]
// One safetensors file "<dir>/ckpt-<8-digit number>.safetensors". Tensors are named
// "model.<name>", "optim.<name>", "scaler.<name>". "__metadata__" holds:
//   loom_checkpoint_format  "2"
//   loom_version            LOOM_VERSION of the writer
//   loom_crc32c             CRC-32C of the whole file, every byte of header, metadata and data,
//                           as 8 hex digits (computed with them as '0'): Note [Checkpoint
//                           integrity] in nn/checkpoint.cpp
//   extra.<key>             TrainingState::extra
//   rng.<name>.seed/offset  TrainingState::rng, decimal
// A file written by loom loads in Python's safetensors library like any other.
struct TrainingState {
  NamedTensors model;      // Module::state_dict()
  NamedTensors optimizer;  // Optimizer::state_dict()
  NamedTensors scaler;     // GradScaler state (scale, growth tracker, factors); may be empty
  std::map<std::string, std::string> extra;  // epoch, step, sampler position, ...
  // Generator states by name. save_checkpoint records loom::default_generator() as "default"
  // unless the caller set that entry; restore_default_rng() puts it back.
  std::map<std::string, GeneratorState> rng;
  std::string source;        // the file it was loaded from (for error messages); empty when built
  std::string loom_version;  // of the program that wrote it (set by load_checkpoint)

  // extra[key] as an integer; the Error names the key and the file when it is missing or bad.
  int64_t extra_int(const std::string& key) const;
  void set_extra(const std::string& key, int64_t v) { extra[key] = std::to_string(v); }
};

// Writes "<dir>/ckpt-<number>.safetensors" atomically (creating `dir` if needed), then deletes
// older checkpoints so that the newest `keep_last` remain (keep_last <= 0 keeps all), and removes
// temporary files left by writers of this host that were killed. Returns the path written.
// Tensors may live on any device; they are copied to the host.
std::string save_checkpoint(const std::string& dir, int64_t number, const TrainingState& state,
                            int keep_last = 3);

// Reads and checks a checkpoint: tensors come back on the CPU (the caller moves them, e.g. with
// load_state_dict on a module already on its device). Errors name the file and what is wrong.
TrainingState load_checkpoint(const std::string& path);
// The same from a whole file's n bytes in memory; `path` names it in errors.
TrainingState load_checkpoint_bytes(const void* data, size_t n, const std::string& path);

// Sets loom::default_generator() to state.rng["default"] (no-op when absent).
void restore_default_rng(const TrainingState& state);

// The checkpoint files in `dir` as (number, path), oldest first; empty when `dir` does not exist.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir);

// The newest checkpoint in `dir` that loads and passes every check. A newer one that fails
// (truncated, corrupt) is skipped with a warning on stderr. nullopt when there is none. Running
// out of memory while loading is not the file's fault: that OutOfMemoryError is thrown.
std::optional<std::string> latest_checkpoint(const std::string& dir);
// The same, returning the loaded state (reads the file once).
std::optional<TrainingState> load_latest_checkpoint(const std::string& dir);

}  // namespace loom
