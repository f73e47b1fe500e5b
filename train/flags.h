// The command-line flags of programs built on loom (CLI11): the flags every training program
// shares (--device, --epochs, --batch-size, ...) filling a TrainConfig (train/train_config.h),
// the few the training benchmark shares with them (--device, --cuda-graph, --amp, ...), one
// function each, and the checking they use: numeric ranges with readable bounds, non-finite numbers
// refused, defaults shown by --help, a bad flag answered with the message, the usage line and exit
// code 2. Header-only, so that the loom library itself needs no CLI11. Leaves out: a program's own
// flags (it adds them after these).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>

#include "train/train_config.h"

namespace loom::train {

// The whole of s read as an int64_t (std::stoll) or a double (std::stod); none when it does not
// start with one or has anything after it.
template <typename T>
std::optional<T> parse_whole(const std::string& s) {
  size_t used = 0;
  T v = 0;
  try {
    if constexpr (std::is_integral_v<T>)
      v = std::stoll(s, &used);
    else
      v = std::stod(s, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != s.size()) return std::nullopt;
  return v;
}

// Accepts an integer in [lo, hi]; refuses anything else with "expected an integer in [lo, hi],
// got <value>". CLI11 puts the flag's name in front.
inline CLI::Validator int_range(int64_t lo, int64_t hi) {
  std::ostringstream desc;
  desc << "[" << lo << ", " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::optional<int64_t> v = parse_whole<int64_t>(s);
        if (!v || *v < lo || *v > hi)
          return "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "], got '" + s + "'";
        return {};
      },
      desc.str());
}

// Accepts a finite number in [lo, hi] (or (lo, hi] with open_lo): never nan or inf.
inline CLI::Validator real_range(double lo, double hi, bool open_lo = false) {
  std::ostringstream desc;
  desc << (open_lo ? "(" : "[") << lo << ", " << hi << "]";
  std::string range = desc.str();
  return CLI::Validator(
      [lo, hi, open_lo, range](std::string& s) -> std::string {
        const std::optional<double> v = parse_whole<double>(s);
        if (!v || !std::isfinite(*v))
          return "expected a finite number in " + range + ", got '" + s + "'";
        if (*v > hi || *v < lo || (open_lo && *v == lo))
          return "expected a number in " + range + ", got '" + s + "'";
        return {};
      },
      range);
}

// The most data-loading threads worth starting: 4 per hardware thread (more only add switching).
inline int64_t max_workers() {
  unsigned hw = std::thread::hardware_concurrency();
  return 4 * int64_t(hw == 0 ? 1 : hw);
}

// Call before adding options: --help then shows every default.
inline void configure_app(CLI::App& app) {
  app.option_defaults()->always_capture_default();
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string help = a->help(), usage;
    std::istringstream lines(help);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("Usage:", 0) == 0) usage = line;
    return std::string(e.what()) + "\n" + usage +
           "\nRun with --help for every flag and its default.\n";
  });
}

// Parses the flags. Returns -1 to go on, else the exit code (0 after --help, 2 after a bad flag,
// with the message and the usage line on stderr).
inline int parse_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return -1;
}

// The flags that the training programs share with the training benchmark
// (benchmarks/bench_train.cpp), defined once so that each means, and reads in --help, the same
// in both.

inline void add_device_flag(CLI::App& app, std::string& device) {
  app.add_option("--device", device, "cpu, cuda or cuda:N (default: cuda if present)");
}

inline void add_cuda_graph_flag(CLI::App& app, bool& cuda_graph) {
  app.add_flag("--cuda-graph", cuda_graph,
               "capture the whole training step (zero-grad, forward, backward, optimizer) as one "
               "CUDA graph and replay it");
}

inline void add_amp_flag(CLI::App& app, std::string& amp) {
  app.add_option("--amp", amp,
                 "mixed precision: off (strict fp32), bf16 (autocast), fp16 (autocast and loss "
                 "scaling) or fp8 (bf16 autocast, and the Linears' products in FP8: docs/fp8.md)")
      ->check(CLI::IsMember({"off", "bf16", "fp16", "fp8"}));
}

inline void add_recompute_activations_flag(CLI::App& app, bool& recompute) {
  app.add_flag(
      "--recompute-activations", recompute,
      "keep batch norm + ReLU and GELU outputs out of memory between forward and backward, "
      "rebuilding them from their inputs in the backward (one elementwise pass each): a "
      "lower peak for a little time (Note [Recomputed activations], docs/perf.md)");
}

// The transformer models' (GPT, Llama) activation checkpointing.
inline void add_activation_checkpointing_flag(CLI::App& app, bool& checkpointing) {
  app.add_flag("--activation-checkpointing", checkpointing,
               "keep only each transformer block's input in forward and recompute the block in "
               "backward (less memory, one more forward)");
}

// How the model and its training state are spread over the processes (docs/parallelism.md,
// docs/sharding.md): --zero, --tp, --sequence-parallel, --pp and the pipeline's schedule. The
// three counts (processes or chunks to split over) take 1 to 1024.
inline void add_parallel_flags(CLI::App& app, TrainConfig& c) {
  auto count = [&app](const std::string& name, int& v, const std::string& help) {
    app.add_option(name, v, help)->check(int_range(1, 1024));
  };
  app.add_option("--zero", c.zero,
                 "shard the training state over the processes (ZeRO, docs/sharding.md): 0 = DDP "
                 "(each holds everything), 1 = optimizer state, 2 = also gradients, 3 = also "
                 "parameters (FullyShardedDataParallel)")
      ->check(int_range(0, 3));
  count("--tp", c.tp,
        "tensor parallel: split each transformer block's matrices over this many processes "
        "(docs/parallelism.md); the world / tp others are data-parallel copies");
  app.add_flag("--sequence-parallel", c.sequence_parallel,
               "under --tp: the norms, dropout and residual adds on T/tp positions per process "
               "(Megatron's sequence parallel; less activation memory)");
  count("--pp", c.pp,
        "pipeline parallel: cut the transformer blocks into this many stages, one per process, "
        "the step's --grad-accum micro-batches flowing through them");
  app.add_option("--pp-schedule", c.pp_schedule,
                 "the pipeline's schedule: 1f1b, gpipe or interleaved (1F1B over "
                 "--pp-virtual-stages chunks per process)")
      ->check(CLI::IsMember({"1f1b", "gpipe", "interleaved"}));
  count("--pp-virtual-stages", c.pp_virtual_stages,
        "with --pp-schedule interleaved: the blocks cut into pp x this many chunks, chunk c on "
        "process c mod pp (Megatron's virtual pipeline stages; 2 or more)");
}

// Adds the common flags to a CLI11 app and sets the app up so that --help shows defaults. Call it
// before adding the program's own options.
inline void add_train_flags(CLI::App& app, TrainConfig& c) {
  configure_app(app);  // before any option: --help shows the defaults
  add_device_flag(app, c.device);
  app.add_option("--epochs", c.epochs, "passes over the training set")
      ->check(int_range(1, 1000000));
  app.add_option("--batch-size", c.batch_size,
                 "examples per step over all processes (each of N processes takes 1/N)")
      ->check(int_range(1, 1 << 24));
  app.add_option("--grad-accum", c.grad_accum,
                 "gradient accumulation: each step runs K micro-batches of --batch-size / K "
                 "examples (per process: / N), then one update, so the effective batch stays "
                 "--batch-size and activation memory is that of a micro-batch")
      ->check(int_range(1, 1 << 20));
  app.add_option("--lr", c.lr, "learning rate")->check(real_range(0, 1e3, true));
  app.add_option("--optimizer", c.optimizer, "sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  app.add_option("--weight-decay", c.weight_decay, "weight decay")->check(real_range(0, 1e3));
  app.add_option("--label-smoothing", c.label_smoothing, "cross-entropy label smoothing")
      ->check(real_range(0, 0.99));
  app.add_option("--seed", c.seed, "seed of initialisation, shuffling and augmentation");
  app.add_option("--data-dir", c.data_dir, "folder with the Fashion-MNIST idx files");
  app.add_option("--workers", c.workers,
                 "data-loading worker threads (at most 4 per hardware thread)")
      ->check(int_range(0, max_workers()));
  app.add_option("--log-dir", c.log_dir, "write TensorBoard event files here");
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "save a checkpoint here after every epoch");
  app.add_option("--keep-last", c.keep_last, "checkpoints to keep")->check(int_range(1, 1000000));
  app.add_flag("--resume", c.resume,
               "continue from the newest valid checkpoint in --checkpoint-dir (which must exist)");
  add_cuda_graph_flag(app, c.cuda_graph);
  app.add_option("--train-limit", c.train_limit, "train on the first N images only (0: all)")
      ->check(int_range(0, int64_t(1) << 40));
  app.add_option("--max-steps", c.max_steps, "stop after N steps in total (0: no limit)")
      ->check(int_range(0, int64_t(1) << 50));
  app.add_option("--log-every", c.log_every, "read the loss back every N steps")
      ->check(int_range(1, 1000000));
  app.add_flag("--allow-nonfinite", c.allow_nonfinite,
               "keep training when the loss is nan or inf (default: stop)");
  app.add_option("--checkpoint-every", c.checkpoint_every,
                 "also save a checkpoint every N steps (0: per epoch only)")
      ->check(int_range(0, int64_t(1) << 50));
  app.add_flag("--detect-anomaly", c.detect_anomaly,
               "stop at the first NaN or Inf made in forward or backward, naming the op and the "
               "module whose forward made it (slow: reads every op's output back)");
  add_recompute_activations_flag(app, c.recompute_activations);
  app.add_flag("--profile", c.profile,
               "print each process's step-time breakdown (data, forward, backward, exposed "
               "all-reduce, optimizer)");
  add_parallel_flags(app, c);
  add_amp_flag(app, c.amp);
}

}  // namespace loom::train
