// generate: text from a Hugging Face model folder (GPT-2, Llama 2 and 3, TinyLlama, Mistral, Qwen2,
// Phi-3:
// nn/hf_causal_lm.h), as transformers' tokenizer + model.generate would give it: the prompt
// encoded by the folder's tokenizer.json with its post-processor (Llama's <s> in front), the new
// tokens drawn with the KV cache (temperature, top-k, top-p; --temperature 0 is greedy), stopping
// at generation_config.json's eos_token_id, the prompt and the new text printed, and the speed on
// stderr. --adapter merges a PEFT LoRA adapter into the model first (nn/lora_peft.h);
// --cuda-graph decodes through a preallocated cache, each step one graph replay on a GPU. Leaves
// out: chat templates (tokenizer_config.json's Jinja: write the chat markup into the prompt
// yourself), batches of prompts, beam search and repetition penalties.
//
//   ./build/examples/generate --model TinyLlama-1.1B-Chat-v1.0/ --prompt "The capital of France is"
//   ./build/examples/generate --model Qwen2.5-0.5B/ --dtype bfloat16 --temperature 0
//   --max-new-tokens 32
//   ./build/examples/generate --model tests/nn/golden/hf/llama --prompt-ids "5 17 3" --print-ids
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/tensor.h"
#include "data/tokenizer.h"
#include "distributed/env.h"
#include "nn/gpt_sample.h"
#include "nn/hf_causal_lm.h"
#include "train/run_log.h"
#include "train/run_setup.h"

using namespace loom;

namespace {

struct Flags {
  std::string model, adapter, tokenizer, prompt, prompt_ids, device, dtype = "float32";
  nn::SampleOptions sampling{.max_new_tokens = 64, .temperature = 0.8};
  std::vector<int64_t> stop;
  bool no_template = false, print_ids = false;
};

std::vector<int64_t> parse_ids(const std::string& text) {
  std::istringstream in(text);
  std::vector<int64_t> ids;
  for (std::string word; in >> word;) {
    size_t used = 0;
    int64_t id = -1;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
    }
    LOOM_CHECK(used == word.size() && id >= 0, "generate: --prompt-ids \"", text, "\": \"", word,
               "\" is not a token id");
    ids.push_back(id);
  }
  LOOM_CHECK(!ids.empty(), "generate: --prompt-ids is empty");
  return ids;
}

// The prompt's ids: --prompt-ids as given, or --prompt through the tokenizer and (unless
// --no-template) its post-processor. `text_ids` gets the text's own ids for printing.
std::vector<int64_t> prompt_ids(const Flags& f, const data::Tokenizer* tok,
                                std::vector<int32_t>& text_ids) {
  if (!f.prompt_ids.empty()) return parse_ids(f.prompt_ids);
  LOOM_CHECK(tok != nullptr,
             "generate: --prompt needs a tokenizer (--tokenizer, or a "
             "tokenizer.json in --model); or give --prompt-ids");
  text_ids = tok->encode(f.prompt, data::SpecialTokens::allow());
  const std::vector<int32_t> ids = f.no_template ? text_ids : tok->post_process(text_ids);
  LOOM_CHECK(!ids.empty(), "generate: --prompt \"", f.prompt, "\" encodes to no token");
  return {ids.begin(), ids.end()};
}

// The folder's tokenizer.json unless --tokenizer names one; none (ids only) without either.
std::unique_ptr<data::Tokenizer> open_tokenizer(const Flags& f) {
  if (!f.tokenizer.empty()) return data::load_tokenizer(f.tokenizer);
  if (!f.prompt_ids.empty()) return nullptr;
  return data::load_tokenizer(f.model);  // an error naming the folder when it has none
}

int run(Flags f) {
  const Device device = train::pick_device(f.device, distributed::job_env());
  auto model = nn::load_hf_causal_lm(f.model, device, dtype_from_name(f.dtype));
  if (!f.adapter.empty())
    std::fprintf(stderr, "generate: merged %ld LoRA modules of %s\n",
                 long(nn::merge_hf_adapter(*model, f.model, f.adapter)), f.adapter.c_str());
  const std::unique_ptr<data::Tokenizer> tok = open_tokenizer(f);
  std::vector<int32_t> text_ids;
  const std::vector<int64_t> prompt = prompt_ids(f, tok.get(), text_ids);
  f.sampling.stop_tokens = f.stop.empty() ? nn::hf_stop_tokens(f.model) : f.stop;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> out = nn::generate(*model, prompt, f.sampling);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tok && f.prompt_ids.empty()) {  // the prompt's text and the new text, decoded together
    text_ids.insert(text_ids.end(), out.begin(), out.end());
    std::printf("%s\n", tok->decode(text_ids).c_str());
  }
  if (f.print_ids || !tok || !f.prompt_ids.empty()) {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%ld", i ? " " : "", long(out[i]));
    std::printf("\n");
  }
  std::fflush(stdout);  // the text first, then the speed
  std::fprintf(stderr, "generate: %zu prompt tokens, %zu new in %.3f s (%.1f tokens/s) on %s\n",
               prompt.size(), out.size(), secs, double(out.size()) / secs, device.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generate text from a Hugging Face model folder (GPT-2, Llama, Mistral, Qwen2)"};
  Flags f;
  app.add_option("--model", f.model, "the folder: config.json, *.safetensors, tokenizer.json")
      ->required();
  app.add_option("--adapter", f.adapter, "a PEFT LoRA adapter folder, merged into the model");
  app.add_option("--tokenizer", f.tokenizer, "another tokenizer (default: the folder's)");
  auto* text = app.add_option("--prompt", f.prompt, "the text to continue");
  app.add_option("--prompt-ids", f.prompt_ids, "the prompt as token ids (\"1 450 7483\")")
      ->excludes(text);
  app.add_option("--max-new-tokens", f.sampling.max_new_tokens, "tokens to generate at most")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  app.add_option("--temperature", f.sampling.temperature, "0: greedy")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--top-k", f.sampling.top_k, "draw among the k most likely (0: all)");
  app.add_option("--top-p", f.sampling.top_p, "then among the most likely reaching p")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--seed", f.sampling.seed, "the draws' random stream");
  app.add_option("--stop", f.stop, "stop ids (default: generation_config.json's eos_token_id)");
  app.add_option("--device", f.device, "cpu, cuda or cuda:N (default: cuda if present)");
  app.add_option("--dtype", f.dtype, "the weights' dtype on the device")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  app.add_flag("--cuda-graph", f.sampling.cuda_graph,
               "a preallocated KV cache, each decode step replayed as a CUDA graph on a GPU "
               "(nn/graph_decode.h; on the CPU the same step runs eagerly)");
  app.add_flag("--no-template", f.no_template, "no post-processor (no <s> in front)");
  app.add_flag("--print-ids", f.print_ids, "also print the new tokens' ids");
  CLI11_PARSE(app, argc, argv);
  return train::run_main("generate", [&] { return run(f); });
}
