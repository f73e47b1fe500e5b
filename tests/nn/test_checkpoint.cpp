// nn/checkpoint and nn/serialize: training state round trips (bit-exact), any device/layout in,
// keep-last-K, fallback past a corrupt newest file (but not past running out of memory), and a
// writer killed mid-write.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "autograd/ops/ops.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/out_of_memory.h"
#include "nn/checkpoint.h"
#include "nn/serialize.h"
#ifdef LOOM_WITH_CUDA
#include "core/cuda/stream.h"
#endif
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ha = to_host_contiguous(a), hb = to_host_contiguous(b);
  size_t n = size_t(ha.numel()) * ha.element_size();
  return n == 0 || std::memcmp(ha.data_ptr(), hb.data_ptr(), n) == 0;
}

const Tensor* find(const NamedTensors& v, const std::string& name) {
  for (const auto& [n, t] : v)
    if (n == name) return &t;
  return nullptr;
}

void expect_same(const NamedTensors& want, const NamedTensors& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [name, t] : want) {
    const Tensor* g = find(got, name);
    ASSERT_NE(g, nullptr) << what << " lacks " << name;
    EXPECT_TRUE(same_bits(t, *g)) << what << " " << name;
  }
}

// A training state with what real ones hold: parameters (one requiring grad, one a transposed
// view), a buffer, optimizer moments and 0-d hyper-parameters, scaler scalars, counters.
TrainingState sample_state(float fill = 0.5f) {
  TrainingState s;
  Tensor w = full({3, 4}, fill);
  w.requires_grad_(true);
  Tensor base = arange(0, 6, 1, {.dtype = kF32});
  s.model = {{"fc.weight", w},
             {"fc.bias", base.view({2, 3}).t()},  // not contiguous
             {"bn.num_batches_tracked", scalar_tensor(17, {.dtype = kI64})}};
  s.optimizer = {{"state.0.exp_avg", full({3, 4}, -0.25)},
                 {"state.0.step", scalar_tensor(12, {.dtype = kF64})},
                 {"param_groups.0.lr", scalar_tensor(1e-3, {.dtype = kF64})}};
  s.scaler = {{"scale", scalar_tensor(65536.0)},
              {"growth_tracker", scalar_tensor(3, {.dtype = kI64})}};
  s.extra = {{"epoch", "2"}, {"sampler_position", "128"}, {"note", "any text"}};
  s.rng["sampler"] = GeneratorState{42, 7};
  return s;
}

}  // namespace

TEST(Serialize, AnyLayoutInSameValuesOut) {
  TempDir dir;
  Tensor base = arange(0, 12, 1, {.dtype = kF64}).view({3, 4});
  Tensor p = full({2, 2}, 1.25);
  p.requires_grad_(true);
  NamedTensors in = {{"transposed", base.t()},
                     {"sliced", base.slice(1, 1, 4, 2)},
                     {"param", p},
                     {"bf16", base.to(kBF16)}};
  save_safetensors(dir.file("x.safetensors"), in, {{"m", "1"}});
  SafetensorsFile f = load_safetensors(dir.file("x.safetensors"));
  EXPECT_EQ(f.metadata.at("m"), "1");
  expect_same(in, f.tensors, "file");
  EXPECT_EQ(f.at("transposed").shape(), (Shape{4, 3}));
  EXPECT_EQ(f.at("transposed").to_vector<double>()[1], 4.0);  // (0, 1) of the transpose
  EXPECT_EQ(f.at("sliced").to_vector<double>(), (std::vector<double>{1, 3, 5, 7, 9, 11}));
  EXPECT_FALSE(f.at("param").requires_grad());
  EXPECT_THROW(save_safetensors(dir.file("y.safetensors"), {{"u", Tensor()}}), Error);
}

TEST(Checkpoint, RoundTripIsBitExact) {
  TempDir dir;
  manual_seed(1234);
  rand({10});  // advance the default generator
  GeneratorState before = default_generator().state();
  TrainingState s = sample_state();
  std::string path = save_checkpoint(dir.path, 7, s);
  EXPECT_EQ(fs::path(path).filename(), "ckpt-00000007.safetensors");

  rand({5});  // move on, then restore
  TrainingState r = load_checkpoint(path);
  expect_same(s.model, r.model, "model");
  expect_same(s.optimizer, r.optimizer, "optimizer");
  expect_same(s.scaler, r.scaler, "scaler");
  EXPECT_EQ(r.extra, s.extra);
  EXPECT_EQ(r.extra_int("epoch"), 2);
  EXPECT_EQ(r.extra_int("sampler_position"), 128);
  EXPECT_EQ(r.rng.at("sampler").seed, 42u);
  EXPECT_EQ(r.rng.at("sampler").offset, 7u);
  EXPECT_EQ(r.rng.at("default").seed, before.seed);
  EXPECT_EQ(r.rng.at("default").offset, before.offset);
  EXPECT_EQ(r.loom_version, LOOM_VERSION);
  EXPECT_EQ(r.source, path);
  restore_default_rng(r);
  EXPECT_EQ(default_generator().state().offset, before.offset);
  // The same draws as right after the save.
  Tensor again = rand({5});
  restore_default_rng(r);
  EXPECT_TRUE(same_bits(again, rand({5})));
  // The file is plain safetensors with the documented names and metadata.
  SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.contains("model.fc.weight"));
  EXPECT_TRUE(f.contains("optim.param_groups.0.lr"));
  EXPECT_TRUE(f.contains("scaler.scale"));
  EXPECT_EQ(f.metadata.at("extra.epoch"), "2");
  EXPECT_EQ(f.metadata.at("rng.sampler.seed"), "42");
  EXPECT_EQ(f.metadata.at("loom_checkpoint_format"), "2");  // 2: the CRC covers the whole file
}

TEST(Checkpoint, EmptySectionsAndExplicitDefaultRng) {
  TempDir dir;
  TrainingState s;
  s.model = {{"w", from_vector<float>({1, 2}, {2})}};
  s.rng["default"] = GeneratorState{9, 99};
  TrainingState r = load_checkpoint(save_checkpoint(dir.path, 0, s));
  EXPECT_TRUE(r.optimizer.empty());
  EXPECT_TRUE(r.scaler.empty());
  EXPECT_TRUE(r.extra.empty());
  EXPECT_EQ(r.rng.at("default").seed, 9u);
  EXPECT_EQ(r.rng.at("default").offset, 99u);
  EXPECT_THROW(r.extra_int("epoch"), Error);
  r.extra["epoch"] = "two";
  try {
    r.extra_int("epoch");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'epoch' is not an integer"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(r.source), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, KeepsTheLastK) {
  TempDir dir;
  TrainingState s = sample_state();
  for (int64_t n = 1; n <= 5; ++n) save_checkpoint(dir.path, n, s, /*keep_last=*/2);
  auto all = list_checkpoints(dir.path);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 4);
  EXPECT_EQ(all[1].first, 5);
  for (int64_t n = 6; n <= 8; ++n) save_checkpoint(dir.path, n, s, /*keep_last=*/0);  // keep all
  EXPECT_EQ(list_checkpoints(dir.path).size(), 5u);
  // Numbers sort numerically, also past the zero padding; other files are ignored.
  save_checkpoint(dir.path, 123456789012, s, 0);
  write_bytes(dir.file("ckpt-abc.safetensors"), "x");
  write_bytes(dir.file("notes.txt"), "x");
  all = list_checkpoints(dir.path);
  EXPECT_EQ(all.back().first, 123456789012);
  EXPECT_EQ(all.front().first, 4);
  // Saving an older number never deletes the file just written.
  save_checkpoint(dir.path, 1, s, 1);
  all = list_checkpoints(dir.path);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 1);
  EXPECT_EQ(all[1].first, 123456789012);
  EXPECT_TRUE(list_checkpoints(dir.file("does-not-exist")).empty());
  EXPECT_FALSE(latest_checkpoint(dir.file("does-not-exist")).has_value());
  EXPECT_THROW(save_checkpoint(dir.path, -1, s), Error);
}

TEST(Checkpoint, LatestSkipsACorruptOrTruncatedNewest) {
  TempDir dir;
  for (int64_t n = 1; n <= 3; ++n) save_checkpoint(dir.path, n, sample_state(float(n)), 0);
  auto all = list_checkpoints(dir.path);
  EXPECT_EQ(*latest_checkpoint(dir.path), all[2].second);

  // Truncate the newest: skipped with a warning naming it.
  std::string newest = read_bytes(all[2].second);
  write_bytes(all[2].second, newest.substr(0, newest.size() / 2));
  testing::internal::CaptureStderr();
  auto latest = latest_checkpoint(dir.path);
  std::string warn = testing::internal::GetCapturedStderr();
  EXPECT_EQ(*latest, all[1].second);
  EXPECT_NE(warn.find(all[2].second), std::string::npos) << warn;
  EXPECT_NE(warn.find("truncated"), std::string::npos) << warn;
  EXPECT_THROW(load_checkpoint(all[2].second), Error);

  // Flip one data byte of the next: the header still parses, the checksum catches it.
  std::string second = read_bytes(all[1].second);
  second[second.size() - 20] ^= 0x01;
  write_bytes(all[1].second, second);
  try {
    load_checkpoint(all[1].second);
    ADD_FAILURE() << "corrupt data loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(all[1].second), std::string::npos) << e.what();
  }
  testing::internal::CaptureStderr();
  auto st = load_latest_checkpoint(dir.path);
  testing::internal::GetCapturedStderr();
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->source, all[0].second);
  EXPECT_TRUE(same_bits(*find(st->model, "fc.weight"), full({3, 4}, 1.0)));

  // Nothing valid left: nullopt, not an exception.
  write_bytes(all[0].second, "garbage");
  testing::internal::CaptureStderr();
  EXPECT_FALSE(latest_checkpoint(dir.path).has_value());
  testing::internal::GetCapturedStderr();
}

// Note [Out of memory]: a run that cannot load its checkpoint for lack of memory must stop, not
// skip the checkpoint and start a new run that would then rotate it away.
TEST(Checkpoint, OutOfMemoryWhileLoadingIsAnErrorNotASkip) {
  TempDir dir;
  TrainingState s = sample_state();
  s.model.push_back({"big", zeros({1 << 18})});  // 1 MiB
  const std::string path = save_checkpoint(dir.path, 1, s, 0);
  const std::string bytes = read_bytes(path);
  const size_t before = cpu_memory_limit();
  set_cpu_memory_limit(cpu_alloc_stats().live_bytes + (64 << 10));  // less than "big"
  testing::internal::CaptureStderr();
  EXPECT_THROW(load_latest_checkpoint(dir.path), OutOfMemoryError);
  const std::string warn = testing::internal::GetCapturedStderr();
  set_cpu_memory_limit(before);
  EXPECT_EQ(warn.find("skipping"), std::string::npos) << warn;
  EXPECT_EQ(read_bytes(path), bytes);
  auto st = load_latest_checkpoint(dir.path);  // with the memory back it loads
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(same_bits(*find(st->model, "big"), zeros({1 << 18})));
}

TEST(Checkpoint, ForeignFilesAreErrorsNamingTheFile) {
  TempDir dir;
  std::string plain = dir.file("ckpt-00000001.safetensors");
  write_safetensors(plain, {{"model.w", from_vector<float>({1}, {1})}});
  try {
    load_checkpoint(plain);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(plain), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a loom checkpoint"), std::string::npos) << e.what();
  }
  TrainingState s = sample_state();
  std::string path = save_checkpoint(dir.path, 2, s);
  SafetensorsFile f = read_safetensors(path);
  f.tensors.emplace_back("stray", from_vector<float>({1}, {1}));
  write_safetensors(path, f.tensors, f.metadata);
  EXPECT_THROW(load_checkpoint(path), Error);  // checksum, and the stray name
  f.tensors.pop_back();
  f.metadata["rng.default.seed"] = "-5";
  write_safetensors(path, f.tensors, f.metadata);
  EXPECT_THROW(load_checkpoint(path), Error);
  f.metadata["rng.default.seed"] = "5";
  f.metadata["loom_checkpoint_format"] = "99";
  write_safetensors(path, f.tensors, f.metadata);
  EXPECT_THROW(load_checkpoint(path), Error);
}

// Note [Killing the writer]
// A child process starts saving a large checkpoint and is SIGKILLed while its temporary file is
// being written. The previous checkpoint must still be the latest and load; no file may exist at
// the new checkpoint's path; the next save removes the dead writer's temporary file.
TEST(Checkpoint, KilledWriterLeavesThePreviousCheckpointLoadable) {
  TempDir dir;
  TrainingState small = sample_state(1.0f);
  std::string first = save_checkpoint(dir.path, 1, small);
  TrainingState big;
  big.model = {{"huge", full({32, 1024, 1024}, 0.75)}};  // 128 MiB
  std::string target = dir.file("ckpt-00000002.safetensors");

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      save_checkpoint(dir.path, 2, big);
    } catch (...) {
    }
    _exit(0);
  }
  std::string temp = atomic_temp_path(target, long(pid));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (!(fs::exists(temp, ec) && fs::file_size(temp, ec) > 0) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "the writer finished before the kill";
  EXPECT_FALSE(fs::exists(target)) << "a partial checkpoint is visible under its final name";
  EXPECT_TRUE(fs::exists(temp));
  EXPECT_LT(fs::file_size(temp), size_t(128) << 20);

  auto latest = latest_checkpoint(dir.path);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, first);
  expect_same(small.model, load_checkpoint(first).model, "model");

  save_checkpoint(dir.path, 3, small);
  EXPECT_FALSE(fs::exists(temp)) << "the dead writer's temporary file was not cleaned up";
}

// Tensors on a GPU (strided, half precision) save through host copies and load back onto the GPU.
TEST(CheckpointCuda, DeviceTensorsRoundTrip) {
#ifndef LOOM_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU";
  TempDir dir;
  const Device gpu = cuda_device(0);
  Tensor base = arange(0, 12, 1, {.dtype = kF32}).view({3, 4}).to(gpu);
  NamedTensors in = {
      {"t", base.t()}, {"h", base.to(kF16)}, {"b", base.to(kBF16).slice(1, 0, 4, 2)}};
  save_safetensors(dir.file("g.safetensors"), in);
  SafetensorsFile f = load_safetensors(dir.file("g.safetensors"), gpu);
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(t.device(), gpu) << name;
  expect_same(in, f.tensors, "gpu file");
  EXPECT_EQ(f.at("t").to_vector<float>(),
            (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));

  TrainingState s;
  s.model = in;
  s.optimizer = {{"state.0.exp_avg", full({3, 4}, 0.5, {.device = gpu})}};
  TrainingState r = load_checkpoint(save_checkpoint(dir.path, 1, s));
  expect_same(s.model, r.model, "model");
  expect_same(s.optimizer, r.optimizer, "optimizer");
  for (const auto& [name, t] : r.model)
    EXPECT_TRUE(t.device().is_cpu()) << name;  // the caller moves them
#endif
}
