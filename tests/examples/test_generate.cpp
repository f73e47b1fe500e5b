// examples/generate.cpp run as a program: its greedy ids from a Hugging Face folder are
// transformers' (the Llama, Mistral, Qwen2 and Phi-3 fixtures of scripts/make-hf-fixtures.py), and
// with a PEFT adapter merged PEFT's; from a folder train_gpt wrote (a small Llama and Llama 2's
// tokenizer layout) its greedy text is train_gpt's own --sample, and with the post-processor the
// prompt starts with <s>; it stops at generation_config.json's eos_token_id; bad input is an error
// naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "example_program.h"
#include "support/golden_file.h"
#include "support/hf_golden.h"
#include "support/temp_files.h"

using namespace loom;
using loom::testing_support::run_command;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".");
}

// A golden file's int64 tensor as "a b c".
std::string ids_text(const test::GoldenFile& g, const std::string& name) {
  std::string s;
  for (int64_t id : test::int_list(g.at(name))) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

std::string generate(const std::string& args) {
  return std::string(GENERATE_BIN) + " --device cpu " + args;
}

}  // namespace

// Also through the static cache and graph step of --cuda-graph (run eagerly on the CPU).
TEST(Generate, GreedyIdsFromHuggingFaceFoldersAreTransformers) {
  for (const char* name : {"llama", "mistral", "qwen2", "phi3"})
    for (const char* graph : {"", " --cuda-graph"}) {
      SCOPED_TRACE(std::string(name) + graph);
      const test::GoldenFile g =
          test::read_golden_file(test::hf_fixture(std::string(name) + ".txt"));
      const std::string want = ids_text(g, "generated");
      auto r =
          run_command(generate("--model " + test::hf_fixture(name) + " --prompt-ids \"" +
                               ids_text(g, "prompt") + "\" --temperature 0 --max-new-tokens " +
                               std::to_string(test::int_list(g.at("generated")).size()) + graph));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_EQ(r.output.substr(0, r.output.find('\n')), want) << r.output;
    }
}

// --adapter merges PEFT's adapter (the llama-lora fixture PEFT made): the first greedy token after
// row 0 of its ids is the argmax of PEFT's logits at the row's last position.
TEST(Generate, APeftAdapterMergedPicksPeftsNextToken) {
  const test::GoldenFile g = test::read_golden_file(test::hf_fixture("llama-lora.txt"));
  const Tensor last = g.at("logits").select(0, 0).select(0, 11);  // (V)
  const std::vector<double> v = last.to_vector<double>();
  std::vector<double> sorted = v;
  std::sort(sorted.rbegin(), sorted.rend());
  ASSERT_GT(sorted[0] - sorted[1], 1e-3);  // no near tie
  const int64_t want = std::max_element(v.begin(), v.end()) - v.begin();
  std::string row;
  for (int64_t t = 0; t < 12; ++t)
    row += (t ? " " : "") + std::to_string(test::int_list(g.at("ids")).at(size_t(t)));
  auto r = run_command(generate("--model " + test::hf_fixture("llama") + " --adapter " +
                                test::hf_fixture("llama-lora") + " --prompt-ids \"" + row +
                                "\" --temperature 0 --max-new-tokens 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // "generate: merged 8 LoRA modules of ..." on stderr first, then the id.
  EXPECT_NE(r.output.find("merged 8 LoRA modules of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\n" + std::to_string(want) + "\n"), std::string::npos) << r.output;
}

// generation_config.json's eos_token_id stops generation after that token (kept), as --stop does.
TEST(Generate, StopsAtTheFoldersEosToken) {
  const test::GoldenFile g = test::read_golden_file(test::hf_fixture("llama.txt"));
  const std::vector<int64_t> want = test::int_list(g.at("generated"));
  test::TempDir dir("loom_generate_eos");
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(test::hf_fixture(std::string("llama/") + f), dir.file(f));
  test::write_bytes(dir.file("generation_config.json"),
                    "{\"eos_token_id\": [95, " + std::to_string(want[2]) + "]}");
  auto r = run_command(generate("--model " + dir.path + " --prompt-ids \"" + ids_text(g, "prompt") +
                                "\" --temperature 0 --max-new-tokens 20"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string first3 = std::to_string(want[0]) + " " + std::to_string(want[1]) + " " +
                             std::to_string(want[2]) + "\n";
  EXPECT_EQ(r.output.substr(0, first3.size()), first3) << r.output;
  EXPECT_NE(r.output.find("3 new in"), std::string::npos) << r.output;
}

// A small Llama trained and saved by train_gpt with Llama 2's tokenizer layout: generate's greedy
// text without the post-processor is train_gpt's greedy --sample; with it the prompt gets <s>.
TEST(Generate, TextFromAFolderTrainGptWroteIsTrainGptsSample) {
  test::TempDir dir("loom_generate_text");
  std::ofstream(dir.file("text.txt")) << [] {
    std::string s;
    for (int i = 0; i < 400; ++i) s += i % 2 ? "the cat saw the dog.\n" : "a dog saw the cat.\n";
    return s;
  }();
  const std::string tok = source_dir() + "/tests/data/tokenizers/llama2_style.json";
  const std::string model = dir.file("model");
  auto train = run_command(std::string(TRAIN_GPT_BIN) +
                           " --device cpu --workers 0 --arch llama --model tiny --n-layer 2 "
                           "--n-embd 64 --n-head 4 --seq-len 32 --batch-size 8 --max-steps 30 "
                           "--text " +
                           dir.file("text.txt") + " --tokenizer " + tok +
                           " --sample 10 --temperature 0 --prompt \"the cat\" --save-hf " + model);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const size_t at = train.output.find("top-k 0) ---\n");
  ASSERT_NE(at, std::string::npos) << train.output;
  const std::string sample =
      train.output.substr(at + 13, train.output.find("\n---", at + 13) - at - 13);
  fs::copy_file(tok, model + "/tokenizer.json");
  auto plain = run_command(generate("--model " + model +
                                    " --prompt \"the cat\" --temperature 0 --max-new-tokens 10 "
                                    "--no-template --print-ids"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.substr(0, plain.output.find('\n')), sample) << plain.output;
  auto bos = run_command(
      generate("--model " + model + " --prompt \"the cat\" --temperature 0 --max-new-tokens 10"));
  ASSERT_EQ(bos.exit_code, 0) << bos.output;
  EXPECT_NE(bos.output.find("generate: 3 prompt tokens"), std::string::npos) << bos.output;  // <s>
}

TEST(Generate, BadInputIsAnErrorNamingIt) {
  struct Case {
    std::string args, message;
  };
  const std::string llama = test::hf_fixture("llama");
  const std::vector<Case> cases = {
      {"--model " + llama + " --prompt hi", "the folder " + llama + " has no tokenizer.json"},
      {"--model " + llama + " --prompt-ids \"1 x\"",
       "--prompt-ids \"1 x\": \"x\" is not a token id"},
      {"--model " + test::hf_fixture("bert-mlm") + " --prompt-ids 1",
       "field \"model_type\" is \"bert\"; loom runs gpt2, llama, mistral, qwen2 and phi3 folders"},
      {"--model " + llama + " --prompt-ids 500", "500"},
      {"--model " + test::hf_fixture("gpt2") + " --adapter " + test::hf_fixture("llama-lora") +
           " --prompt-ids 1",
       "loom merges PEFT adapters into Llama-shaped models (llama, mistral, qwen2, phi3), not GPT"},
  };
  for (const Case& c : cases) {
    auto r = run_command(generate(c.args));
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << ": " << r.output;
  }
}
