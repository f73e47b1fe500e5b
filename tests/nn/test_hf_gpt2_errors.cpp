// load_hf_gpt2 (nn/hf_gpt2.h) on broken copies of the fixture folders of tests/nn/golden/hf/:
// a missing or extra tensor, a shape or dtype other than the config's, a truncated shard, a bad
// header or index, and config.json fields loom's GPT cannot honour. Each is an Error whose
// message names the file, the tensor or field, and the values.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "autograd/ops/ops.h"
#include "core/safetensors.h"
#include "nn/hf_gpt2.h"
#include "support/errors.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using namespace loom;
using namespace loom::nn;
using loom::test::read_bytes;
using loom::test::TempDir;
using loom::test::write_bytes;
namespace fs = std::filesystem;

namespace {

// A copy of a fixture folder to break.
struct Broken {
  TempDir dir{"loom_hf_broken"};
  explicit Broken(const std::string& fixture) {
    fs::copy(test::hf_fixture(fixture), dir.path, fs::copy_options::recursive);
  }
  std::string file(const std::string& name) const { return dir.file(name); }
  void edit_config(const std::function<void(nlohmann::json&)>& f) const {
    nlohmann::json j = nlohmann::json::parse(read_bytes(file("config.json")));
    f(j);
    write_bytes(file("config.json"), j.dump(2));
  }
  // Rewrites one weights file through `f` (the tensors in file order, then written back).
  void edit_weights(const std::string& name, const std::function<void(NamedTensors&)>& f) const {
    SafetensorsFile sf = read_safetensors(file(name));
    f(sf.tensors);
    write_safetensors(file(name), sf.tensors, {{"format", "pt"}});
  }
};

// Loading throws an Error whose message holds every one of `parts`.
void expect_load_error(const Broken& b, const std::vector<std::string>& parts) {
  test::expect_error([&] { load_hf_gpt2(b.dir.path); }, parts);
}

void replace(NamedTensors& ts, const std::string& name, const Tensor& t) {
  for (auto& [n, v] : ts)
    if (n == name) v = t;
}

}  // namespace

TEST(HfGpt2Errors, MissingTensor) {
  Broken b("gpt2");
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    std::erase_if(ts, [](const auto& e) { return e.first == "transformer.h.1.ln_2.bias"; });
  });
  expect_load_error(b, {b.dir.path, "'transformer.h.1.ln_2.bias'", "missing"});
}

TEST(HfGpt2Errors, ExtraTensor) {
  Broken b("gpt2");
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    ts.emplace_back("transformer.h.2.ln_1.weight", ones({32}));
  });
  expect_load_error(
      b, {b.file("model.safetensors"), "'transformer.h.2.ln_1.weight'", "[32]", "extra tensor"});
}

TEST(HfGpt2Errors, ShapeOtherThanTheModels) {
  Broken b("gpt2");
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    replace(ts, "transformer.h.0.attn.c_attn.weight", zeros({32, 95}));
  });
  expect_load_error(b, {b.file("model.safetensors"), "'transformer.h.0.attn.c_attn.weight'",
                        "[32, 95]", "[32, 96]"});
  // A Conv1D weight saved in a Linear's (out, in) layout: as many elements, the wrong shape.
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    replace(ts, "transformer.h.0.attn.c_attn.weight", zeros({96, 32}));
  });
  expect_load_error(b, {b.file("model.safetensors"), "'transformer.h.0.attn.c_attn.weight'",
                        "is [96, 32]", "[32, 96]"});
}

// The config's sizes make the model: a vocab_size the weights do not have is a shape error.
TEST(HfGpt2Errors, ShapeOtherThanTheConfigs) {
  Broken b("gpt2");
  b.edit_config([](nlohmann::json& j) { j["vocab_size"] = 97; });
  expect_load_error(
      b, {b.file("model.safetensors"), "'transformer.wte.weight'", "[96, 32]", "[97, 32]"});
}

TEST(HfGpt2Errors, DtypeOtherThanTheConfigs) {
  Broken b("gpt2");
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    replace(ts, "transformer.ln_f.bias", zeros({32}, {.dtype = kF16}));
  });
  expect_load_error(
      b, {b.file("model.safetensors"), "'transformer.ln_f.bias'", dtype_name(kF16), "float32"});
}

TEST(HfGpt2Errors, IntegerWeights) {
  Broken b("gpt2");
  b.edit_config([](nlohmann::json& j) { j.erase("dtype"); });  // nothing to compare with
  b.edit_weights("model.safetensors", [](NamedTensors& ts) {
    replace(ts, "transformer.ln_f.bias", zeros({32}, {.dtype = kI64}));
  });
  expect_load_error(b, {b.file("model.safetensors"), "'transformer.ln_f.bias'", "floating-point"});
}

TEST(HfGpt2Errors, TruncatedShard) {
  Broken b("gpt2-sharded");
  std::string shard = b.file("model-00002-of-00003.safetensors");
  std::string bytes = read_bytes(shard);
  write_bytes(shard, bytes.substr(0, bytes.size() - 100));
  // the last tensor of the file in data order (names sorted) is the one cut short
  expect_load_error(b, {shard, "truncated", "'transformer.h.1.ln_1.weight'"});
}

TEST(HfGpt2Errors, BadHeader) {
  Broken b("gpt2");
  std::string path = b.file("model.safetensors"), bytes = read_bytes(path);
  write_bytes(path, std::string(8, '\xff') + bytes.substr(8));  // a header length of 2^64 - 1
  expect_load_error(b, {path, "header length"});
  bytes[9] = '[';  // {"__metadata__" ... -> {[__metadata__"
  write_bytes(path, bytes);
  expect_load_error(b, {path, "not valid JSON"});
}

TEST(HfGpt2Errors, IndexAndShardsDisagree) {
  {
    Broken b("gpt2-sharded");
    fs::remove(b.file("model-00003-of-00003.safetensors"));
    expect_load_error(b, {b.file("model.safetensors.index.json"),
                          "'model-00003-of-00003.safetensors'", "does not exist"});
  }
  {
    Broken b("gpt2-sharded");
    b.edit_weights("model-00001-of-00003.safetensors", [](NamedTensors& ts) {
      ts.emplace_back("transformer.h.9.ln_1.weight", ones({32}));
    });
    expect_load_error(b, {b.file("model-00001-of-00003.safetensors"),
                          "'transformer.h.9.ln_1.weight'", "does not list"});
  }
  {
    Broken b("gpt2-sharded");
    nlohmann::json j = nlohmann::json::parse(read_bytes(b.file("model.safetensors.index.json")));
    j["weight_map"]["transformer.wte.weight"] = "model-00002-of-00003.safetensors";
    write_bytes(b.file("model.safetensors.index.json"), j.dump());
    expect_load_error(
        b, {"'transformer.wte.weight'", "model-00002-of-00003.safetensors", "does not hold it"});
  }
  {
    Broken b("gpt2-sharded");
    write_bytes(b.file("model.safetensors.index.json"), "{\"weight_map\": ");
    expect_load_error(b, {b.file("model.safetensors.index.json"), "not valid JSON"});
  }
}

TEST(HfGpt2Errors, NoWeightsOrNoConfig) {
  {
    Broken b("gpt2");
    fs::remove(b.file("model.safetensors"));
    expect_load_error(b, {b.dir.path, "model.safetensors.index.json", "pytorch_model.bin"});
  }
  {
    Broken b("gpt2");
    fs::remove(b.file("config.json"));
    expect_load_error(b, {b.file("config.json"), "cannot open"});
  }
}

// What loom's GPT cannot do is refused naming the field and its value.
TEST(HfGpt2Errors, ConfigFieldsLoomCannotHonour) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* shown;
  };
  std::vector<Case> cases = {{"activation_function", "relu", "\"relu\""},
                             {"activation_function", "gelu", "\"gelu\""},  // the erf GELU
                             {"model_type", "llama", "\"llama\""},
                             {"n_inner", 64, "64"},
                             {"layer_norm_epsilon", 1e-6, "1e-06"},
                             {"scale_attn_weights", false, "false"},
                             {"scale_attn_by_inverse_layer_idx", true, "true"},
                             {"add_cross_attention", true, "true"},
                             {"tie_word_embeddings", false, "false"},
                             {"n_layer", "2", "\"2\""},  // a string, not an integer
                             {"n_layer", nullptr, "missing"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    Broken b("gpt2");
    b.edit_config([&](nlohmann::json& j) { j[c.field] = c.value; });
    expect_load_error(b, {b.file("config.json"), std::string("\"") + c.field + "\"", c.shown});
  }
  Broken b("gpt2");
  b.edit_config([](nlohmann::json& j) { j["attn_pdrop"] = 0.1; });
  expect_load_error(b, {b.file("config.json"), "attn_pdrop 0.1", "one dropout rate"});
  // ... unless the caller sets the rate
  auto model = load_hf_gpt2(b.dir.path, kCPU, {.dropout = 0.05});
  EXPECT_EQ(model->config.dropout, 0.05);
}

// The three rates agree: the model takes them.
TEST(HfGpt2Errors, DropoutComesFromTheConfig) {
  Broken b("gpt2");
  b.edit_config([](nlohmann::json& j) {
    for (const char* k : {"attn_pdrop", "embd_pdrop", "resid_pdrop"}) j[k] = 0.1;
  });
  EXPECT_EQ(load_hf_gpt2(b.dir.path)->config.dropout, 0.1);
}
