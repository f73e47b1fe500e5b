// TrainConfig: what a training run is asked to do (device, epochs, batch, optimizer, folders,
// checkpoints, AMP, ...), filled from the command line by add_train_flags (train/flags.h).
// The example programs and the parts of train/ read it. Leaves out: each program's own options
// (model width, augmentation) and anything parsed (this header needs no CLI11).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "nn/fp8.h"

namespace loom::train {

struct TrainConfig {
  std::string device;  // cpu, cuda, cuda:N; empty = cuda if present
  int64_t epochs = 10;
  int64_t batch_size = 128;  // global: each of N processes takes batch_size / N
  int64_t grad_accum = 1;    // micro-batches per step: each process runs batch_size / N / this
  double lr = 1e-3;
  std::string optimizer = "adam";  // sgd (momentum 0.9), adam, adamw
  double weight_decay = 0.0;
  double label_smoothing = 0.0;
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t workers = 2;
  std::string log_dir;         // TensorBoard event files; empty = none
  std::string checkpoint_dir;  // empty = no checkpoints
  int keep_last = 3;
  bool resume = false;      // continue from the newest valid checkpoint in checkpoint_dir
  bool cuda_graph = false;  // capture the whole fixed-shape step once, replay it
  int64_t train_limit = 0;  // use only the first N training examples (0 = all)
  int64_t max_steps = 0;    // stop after this many steps in total (0 = no limit)
  int64_t log_every = 20;   // read the loss back from the device every N steps
  bool allow_nonfinite =
      false;  // keep going when the loss is nan/inf (default: stop with an error)
  int64_t checkpoint_every = 0;  // also save every N steps, mid-epoch (0 = per epoch only)
  bool profile = false;          // print this process's step-time breakdown at the end
  std::string amp = "off";       // off, bf16 (autocast), fp16 (autocast + GradScaler), fp8 (bf16
                                 // autocast + FP8 Linears: convert_for_amp)
  bool detect_anomaly = false;   // the first NaN/Inf in forward or backward is an error
  bool recompute_activations = false;  // Note [Recomputed activations] (autograd/recompute.h)
  int zero = 0;  // 0 = DDP; 1 = optimizer state sharded over the processes; 2 = and gradients;
                 // 3 = and parameters (FSDP)
  int tp = 1;    // tensor-parallel ranks (the blocks split over them); world / tp read the data
  bool sequence_parallel = false;    // under --tp: norms and dropout on T/tp positions per rank
  int pp = 1;                        // pipeline stages (the blocks cut into pp of them)
  std::string pp_schedule = "1f1b";  // 1f1b, gpipe or interleaved
  int pp_virtual_stages = 1;         // chunks per pp rank (2 or more: interleaved only)

  // --max-steps is set and `step` steps are done.
  bool max_steps_reached(int64_t step) const { return max_steps > 0 && step >= max_steps; }
};

// The dtype --amp runs the step's autocast region in: bfloat16 (bf16, and fp8 around its FP8
// Linears), float16, or none (off).
inline std::optional<DType> autocast_dtype(const TrainConfig& cfg) {
  if (cfg.amp == "off") return std::nullopt;
  return cfg.amp == "fp16" ? DType::F16 : DType::BF16;
}

// --amp fp8: the model's Linears made to run in FP8 (nn::convert_to_fp8, docs/fp8.md), before
// DDP, on every process; `print` (the main process) prints what was converted. Any other --amp
// changes nothing.
inline void convert_for_amp(nn::Module& model, const TrainConfig& cfg, bool print) {
  if (cfg.amp != "fp8") return;
  const std::string summary = nn::fp8_summary(nn::convert_to_fp8(model));
  if (print) std::printf("%s\n", summary.c_str());
}

}  // namespace loom::train
