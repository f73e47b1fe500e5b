// nn/checkpoint: a corrupt byte in any one tensor of a checkpoint is refused on load, for every
// tensor by name, the last one by name ("scaler.scale") included.
// Leaves out: every byte of the file and the header (the checkpoint integrity tests do that).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// What a training state holds: weights, optimizer moments and counters, scaler scalars.
TrainingState state() {
  TrainingState s;
  s.model = {{"fc.weight", full({3, 4}, 0.5)},
             {"fc.bias", full({3}, -1.5)},
             {"bn.num_batches_tracked", scalar_tensor(17, {.dtype = kI64})}};
  s.optimizer = {{"state.0.exp_avg", full({3, 4}, -0.25)},
                 {"state.0.step", scalar_tensor(12, {.dtype = kF64})}};
  s.scaler = {{"scale", scalar_tensor(65536.0)},
              {"growth_tracker", scalar_tensor(3, {.dtype = kI64})}};
  return s;
}

}  // namespace

// For every tensor, a flipped bit in its first byte and one in its last byte: load_checkpoint
// throws an Error naming the file. A checksum that skipped one tensor (say the last by name) would
// let that tensor's corruption load silently.
TEST(Checkpoint, ACorruptByteInAnyTensorIsRefused) {
  TempDir dir;
  std::string path = save_checkpoint(dir.path, 1, state(), 0);
  ASSERT_NO_THROW(load_checkpoint(path));
  const std::string good = read_bytes(path);
  SafetensorsHeader h = read_safetensors_header(path);

  std::vector<std::string> names;
  for (const SafetensorsEntry& e : h.entries) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 7u);
  EXPECT_EQ(names.back(), "scaler.scale") << "the last tensor by name";

  std::string bad_path = (fs::path(dir.path) / "ckpt-00000002.safetensors").string();
  int checked = 0;
  for (const SafetensorsEntry& e : h.entries) {
    ASSERT_GT(e.end, e.begin) << e.name;
    for (uint64_t at : {e.begin, e.end - 1}) {
      for (uint8_t bit : {uint8_t(0x01), uint8_t(0x80)}) {
        std::string bytes = good;
        bytes[size_t(h.data_start + at)] ^= char(bit);
        write_bytes(bad_path, bytes);
        std::string msg;
        try {
          load_checkpoint(bad_path);
        } catch (const Error& err) {
          msg = err.what();
        }
        EXPECT_FALSE(msg.empty()) << e.name << ": byte " << at << " ^ " << int(bit)
                                  << " loaded silently";
        EXPECT_NE(msg.find(bad_path), std::string::npos) << msg;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 7 * 4);
}
