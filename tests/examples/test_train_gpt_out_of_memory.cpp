// Running out of memory in a program (Note [Out of memory] in core/out_of_memory.cpp): train_gpt
// on the CPU under LOOM_CPU_MEMORY_LIMIT, resumed from a checkpoint, fails in its first step with
// exit status 1 and one error line that names the numbers and what to try, and leaves the
// checkpoint byte for byte as it was (and no other file); with room the same run trains. Leaves
// out: the allocator's own numbers (tests/core/test_out_of_memory.cpp) and a real GPU's failure
// (CudaAllocator.OutOfMemoryErrorNamesTheNumbers).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr
};

Outcome run_cmd(const std::string& cmd, int seconds = 120) {
  std::string line = "timeout -k 5 " + std::to_string(seconds) + " sh -c '" + cmd + "' 2>&1";
  Outcome r;
  FILE* p = popen(line.c_str(), "r");
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) r.output.append(buf.data(), n);
  int status = pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("loom_oom_" + std::to_string(::getpid()));
  TempDir() {
    fs::remove_all(path);
    fs::create_directories(path / "ckpt");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Some 20 KB of generated sentences for train_gpt --text.
std::string write_text(const fs::path& dir) {
  std::mt19937 rng(3);
  std::string s;
  const char* words[] = {"the cat ", "a dog ", "saw ", "the river ", "at night", ".\n"};
  while (s.size() < 20000) s += words[rng() % 6];
  std::ofstream((dir / "text.txt").string()) << s;
  return (dir / "text.txt").string();
}

// A 2 x 64 GPT on 64-token windows, 16 per step, on the CPU. Resumed from its checkpoint it holds
// about 3 MiB before the first step, whose activations need more than 8 MiB (measured with glibc).
std::string gpt(const std::string& text, const std::string& args) {
  return std::string(TRAIN_GPT_BIN) + " --device cpu --workers 0 --text " + text +
         " --n-layer 2 --n-embd 64 --n-head 4 --seq-len 64 --batch-size 16 --eval-windows 16"
         " --seed 5 " +
         args;
}

}  // namespace

TEST(OutOfMemoryExit, ResumedRunOverTheLimitExitsWithOneErrorAndLeavesTheCheckpoint) {
  TempDir dir;
  const std::string text = write_text(dir.path);
  const fs::path ckpt = dir.path / "ckpt";
  const std::string common =
      "--eval-every 2 --checkpoint-every 1 --checkpoint-dir " + ckpt.string();
  Outcome first = run_cmd(gpt(text, "--max-steps 2 " + common));
  ASSERT_EQ(first.status, 0) << first.output;
  const fs::path saved = ckpt / "ckpt-00000002.safetensors";
  ASSERT_TRUE(fs::exists(saved)) << first.output;
  const std::string bytes = read_bytes(saved);
  auto files = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(ckpt)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto files_before = files();

  Outcome oom =
      run_cmd("LOOM_CPU_MEMORY_LIMIT=6M " + gpt(text, "--max-steps 4 --resume " + common));
  EXPECT_EQ(oom.status, 1) << oom.output;
  EXPECT_NE(oom.output.find("resumed from "), std::string::npos)
      << "failed before the resume? " << oom.output;
  EXPECT_EQ(count(oom.output, "error"), 1u) << oom.output;
  EXPECT_NE(oom.output.find("train_gpt: error: CPU out of memory: tried to allocate "),
            std::string::npos)
      << oom.output;
  for (const char* part :
       {"live, peak ", "the CPU memory limit is 6.00 MiB", "--batch-size", "--grad-accum K",
        "--amp bf16", "--activation-checkpointing", "--zero 2"})
    EXPECT_NE(oom.output.find(part), std::string::npos) << "no '" << part << "' in " << oom.output;
  EXPECT_EQ(read_bytes(saved), bytes) << "the checkpoint changed";
  EXPECT_EQ(files(), files_before) << "a file was written or removed";

  // Control: with room, the same resumed run trains to the end (the limit, nothing else, failed).
  Outcome roomy =
      run_cmd("LOOM_CPU_MEMORY_LIMIT=512M " + gpt(text, "--max-steps 4 --resume " + common));
  EXPECT_EQ(roomy.status, 0) << roomy.output;
  EXPECT_TRUE(fs::exists(ckpt / "ckpt-00000004.safetensors")) << roomy.output;
}
