// Checkpoint integrity: changing any single byte of a checkpoint file (length prefix, JSON header,
// metadata, data) makes load_checkpoint fail naming the file, and resume falls back to the
// previous valid one. Leaves out: round trips and keep-last-K (test_checkpoint.cpp).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "autograd/ops/ops.h"
#include "nn/checkpoint.h"
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// Small, but with every part a real checkpoint has: several dtypes, a 0-d tensor, counters in
// the metadata, two RNG states.
TrainingState small_state(float v) {
  TrainingState s;
  s.model = {{"fc.weight", full({2, 3}, v)}, {"fc.bias", from_vector<double>({0.25, -0.5}, {2})}};
  s.optimizer = {{"state.0.step", scalar_tensor(7, {.dtype = kI64})}};
  s.scaler = {{"flag", full({2}, 1, {.dtype = kU8})}};
  s.set_extra("epoch", 1);
  s.set_extra("step", 12);
  s.set_extra("position", 3);
  s.rng["default"] = GeneratorState{5, 9};
  s.rng["sampler"] = GeneratorState{42, 7};
  return s;
}

}  // namespace

TEST(CheckpointIntegrity, EverySingleByteChangeIsCaught) {
  TempDir dir;
  std::string path = save_checkpoint(dir.path, 1, small_state(0.5f), 0);
  const std::string good = read_bytes(path);
  ASSERT_GT(good.size(), 200u);
  TrainingState ok =
      load_checkpoint_bytes(good.data(), good.size(), path);  // the intact file loads
  EXPECT_EQ(ok.extra_int("step"), 12);

  // Each byte, one at a time, changed two ways (one bit; all bits), in memory.
  int64_t caught = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t mask : {uint8_t(0x01), uint8_t(0xff)}) {
      std::string bad = good;
      bad[i] = char(uint8_t(bad[i]) ^ mask);
      try {
        load_checkpoint_bytes(bad.data(), bad.size(), path);
        ADD_FAILURE() << "byte " << i << " of " << good.size() << " xor 0x" << std::hex << int(mask)
                      << " loaded without an error";
      } catch (const Error& e) {
        ++caught;
        if (std::string(e.what()).find(path) == std::string::npos)
          ADD_FAILURE() << "byte " << i << ": the error does not name the file: " << e.what();
      }
    }
  }
  EXPECT_EQ(caught, int64_t(2 * good.size()));
}

TEST(CheckpointIntegrity, HeaderAndMetadataChangesAreNamedAsCorruption) {
  TempDir dir;
  std::string path = save_checkpoint(dir.path, 1, small_state(0.5f), 0);
  std::string good = read_bytes(path);
  // Changes that keep the JSON valid and the header consistent: only the checksum sees them.
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"extra.step\":\"12\"", "\"extra.step\":\"19\""},              // metadata: a counter
           {"\"rng.sampler.seed\":\"42\"", "\"rng.sampler.seed\":\"43\""},  // metadata: RNG state
           {"\"extra.epoch\":\"1\"", "\"extra.epoch\":\"3\""}}) {
    size_t at = good.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    std::string bad = good;
    bad.replace(at, from.size(), to);
    try {
      load_checkpoint_bytes(bad.data(), bad.size(), path);
      ADD_FAILURE() << to << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
    }
  }
}

TEST(CheckpointIntegrity, ResumeFallsBackToThePreviousValidOneNamingFileAndProblem) {
  TempDir dir;
  save_checkpoint(dir.path, 1, small_state(1.0f), 0);
  std::string newest = save_checkpoint(dir.path, 2, small_state(2.0f), 0);
  std::string bytes = read_bytes(newest);
  size_t at = bytes.find("\"extra.position\":\"3\"");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 18] = '4';  // the sampler position in the metadata
  write_bytes(newest, bytes);

  testing::internal::CaptureStderr();
  auto st = load_latest_checkpoint(dir.path);
  std::string warn = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(st.has_value());
  EXPECT_NE(st->source, newest);
  for (const auto& [name, t] : st->model) {
    if (name == "fc.weight") {
      EXPECT_EQ(t.sum().item(), 6.0);  // checkpoint 1's weights
    }
  }
  EXPECT_NE(warn.find(newest), std::string::npos) << warn;
  EXPECT_NE(warn.find("checksum mismatch"), std::string::npos) << warn;
}

TEST(CheckpointIntegrity, AFailedWriteIsAnErrorAndThePreviousCheckpointStays) {
  TempDir dir;
  std::string first = save_checkpoint(dir.path, 1, small_state(1.0f), 1);
  // The writer's temporary file cannot be created: a folder already has its name.
  std::string second = dir.path + "/ckpt-00000002.safetensors";
  fs::create_directories(second + ".tmp." + std::to_string(::getpid()));
  try {
    save_checkpoint(dir.path, 2, small_state(2.0f), 1);
    ADD_FAILURE() << "the write did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(second), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(second));
  auto st = load_latest_checkpoint(dir.path);  // keep_last 1 did not delete the only good one
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->source, first);
}
