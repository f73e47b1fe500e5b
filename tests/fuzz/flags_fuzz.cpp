// libFuzzer harness: the example programs' flag parsing (add_train_flags on CLI11, with the range
// checks of train/flags.h). The input is split at newlines into arguments; every input must
// parse or be refused with a CLI11 error, and a parsed config must hold values inside the ranges
// the flags promise. Leaves out: what the flags do (tests/examples).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "train/flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(char(data[i]));
    }
  }
  args.push_back(cur);
  CLI::App app{"flags_fuzz"};
  loom::train::TrainConfig cfg;
  loom::train::add_train_flags(app, cfg);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    app.parse(reversed);
  } catch (const CLI::Error&) {
    return 0;
  }
  // Accepted values obey the documented ranges (train/flags.h refuses the rest).
  if (!std::isfinite(cfg.lr) || cfg.lr <= 0 || !std::isfinite(cfg.weight_decay)) std::abort();
  if (cfg.epochs < 1 || cfg.batch_size < 1 || cfg.workers < 0) std::abort();
  if (!(cfg.label_smoothing >= 0 && cfg.label_smoothing < 1)) std::abort();
  return 0;
}
