// core/safetensors_shards: the shard plan (greedy, in order; an oversized tensor alone), file
// names, the index JSON, name order inside a file, host tensors fetched shard by shard, stale
// files removed; reading a folder back; and every way an index and its shards can disagree.
// transformers' own files are compared byte for byte in tests/nn/test_hf_gpt2.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/safetensors_shards.h"
#include "support/temp_files.h"

using namespace loom;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// Tensors of 400, 400, 800, 2000 and 40 bytes (float32), named so that name order differs from
// the order given.
std::vector<TensorSpec> specs() {
  return {{"z.a", DType::F32, {100}},
          {"b", DType::F32, {10, 10}},
          {"y", DType::F32, {200}},
          {"big", DType::F32, {500}},
          {"a", DType::F32, {10}}};
}

Tensor value(size_t i, const TensorSpec& s) {
  std::vector<float> v(size_t(numel(s.shape)));
  for (size_t k = 0; k < v.size(); ++k) v[k] = float(i * 1000 + k);
  return from_vector(v, s.shape);
}

// Writes specs() with max_bytes; returns the order in which host() was called.
std::vector<size_t> write(const std::string& dir, uint64_t max_bytes) {
  std::vector<size_t> calls;
  auto s = specs();
  write_safetensors_folder(dir, s, [&](size_t i) { return calls.push_back(i), value(i, s[i]); },
                           max_bytes, {{"format", "pt"}});
  return calls;
}

std::vector<std::string> names_in_file_order(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& e : read_safetensors_header(path).entries) out.push_back(e.name);
  return out;
}

void expect_error(const std::string& dir, const std::vector<std::string>& parts) {
  try {
    SafetensorsFolder f(dir);
    ADD_FAILURE() << "no error opening " << dir;
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(SafetensorsShards, ShardNames) {
  EXPECT_EQ(safetensors_shard_name(2, 3), "model-00002-of-00003.safetensors");
  EXPECT_EQ(safetensors_shard_name(12, 100), "model-00012-of-00100.safetensors");
}

TEST(SafetensorsShards, OneFileWhenItFits) {
  TempDir dir;
  write(dir.path, 3640);  // exactly the total
  EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(names_in_file_order(dir.file("model.safetensors")),
            (std::vector<std::string>{"a", "b", "big", "y", "z.a"}));  // by name
  SafetensorsFolder f(dir.path);
  EXPECT_FALSE(f.sharded());
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "big", "y", "z.a"}));
  auto r = f.find("y");
  ASSERT_NE(r.file, nullptr);
  EXPECT_EQ(r.file->tensor(*r.entry).data<float>()[199], 2000.0f + 199);
  EXPECT_EQ(f.find("nope").file, nullptr);
}

// max 1000 bytes: [z.a 400, b 400] (y would make 1600), [y 800], [big 2000 alone], [a 40].
TEST(SafetensorsShards, GreedyShardsAndIndex) {
  TempDir dir;
  std::vector<size_t> calls = write(dir.path, 1000);
  EXPECT_EQ(calls, (std::vector<size_t>{1, 0, 2, 3, 4}));  // shard by shard, by name within one
  std::vector<std::vector<std::string>> want = {{"b", "z.a"}, {"y"}, {"big"}, {"a"}};
  for (size_t s = 0; s < want.size(); ++s)
    EXPECT_EQ(names_in_file_order(dir.file(safetensors_shard_name(s + 1, 4))), want[s]) << s;
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors")));
  nlohmann::json index =
      nlohmann::json::parse(read_bytes(dir.file("model.safetensors.index.json")));
  EXPECT_EQ(index["metadata"]["total_size"], 3640);
  EXPECT_EQ(index["metadata"]["total_parameters"], 910);
  EXPECT_EQ(index["weight_map"]["big"], "model-00003-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"]["z.a"], "model-00001-of-00004.safetensors");
  EXPECT_EQ(index["weight_map"].size(), 5u);

  SafetensorsFolder f(dir.path);
  EXPECT_TRUE(f.sharded());
  EXPECT_EQ(f.files().size(), 4u);
  EXPECT_EQ(f.names().size(), 5u);
  auto r = f.find("a");
  EXPECT_EQ(r.file->path(), dir.file("model-00004-of-00004.safetensors"));
  EXPECT_EQ(r.file->tensor(*r.entry).data<float>()[9], 4009.0f);
}

// A save with another shard count removes the earlier save's weight files, and only those.
TEST(SafetensorsShards, StaleFilesAreRemoved) {
  TempDir dir;
  write(dir.path, 1000);
  write_bytes(dir.file("tokenizer.json"), "{}");
  write(dir.path, 1600);  // [z.a, b, y], [big], [a]
  EXPECT_FALSE(fs::exists(dir.file("model-00004-of-00004.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("model-00003-of-00003.safetensors")));
  write(dir.path, 1 << 20);
  EXPECT_FALSE(fs::exists(dir.file("model-00001-of-00003.safetensors")));
  EXPECT_FALSE(fs::exists(dir.file("model.safetensors.index.json")));
  EXPECT_TRUE(fs::exists(dir.file("model.safetensors")));
  EXPECT_TRUE(fs::exists(dir.file("tokenizer.json")));
}

TEST(SafetensorsShards, WriterChecksItsInputs) {
  TempDir dir;
  auto s = specs();
  try {
    write_safetensors_folder(
        dir.path, s, [&](size_t) { return empty({3}); }, 1000);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'b' should be float32 [10, 10]"),
              std::string::npos)
        << e.what();
  }
  s.push_back(s[0]);
  EXPECT_THROW(write_safetensors_folder(
                   dir.path, s, [&](size_t i) { return value(i, s[i]); }, 1000),
               Error);  // two tensors named z.a
}

// The index's own defects (the disagreements with its shards are in
// tests/nn/test_hf_gpt2_errors.cpp, on transformers' files).
TEST(SafetensorsShards, BadIndexes) {
  TempDir dir;
  write(dir.path, 1000);
  std::string index = dir.file("model.safetensors.index.json");
  nlohmann::json good = nlohmann::json::parse(read_bytes(index));
  auto with = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = good;
    f(j);
    write_bytes(index, j.dump());
  };
  with([](nlohmann::json& j) { j.erase("weight_map"); });
  expect_error(dir.path, {index, "no \"weight_map\" object"});
  with([](nlohmann::json& j) { j["weight_map"]["a"] = 3; });
  expect_error(dir.path, {index, "tensor 'a'", "should be a file name, got 3"});
  with([](nlohmann::json& j) { j["weight_map"]["a"] = "../model-00004-of-00004.safetensors"; });
  expect_error(dir.path, {index, "'../model-00004-of-00004.safetensors'", "not a file name"});
  expect_error(dir.file("nothing-here"), {"nothing-here", "is not a folder"});
}
