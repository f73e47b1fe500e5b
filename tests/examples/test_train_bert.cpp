// train_bert (examples/train_bert.cpp) as a program, on the CPU, with the KJV WordPiece fixture:
// masked-language-model pretraining on a small generated text goes well below the unigram
// entropy of its tokens (what a model that ignores the context reaches at best) and writes a
// Hugging Face folder; fine-tuning from that folder on a generated KJV-shaped text of 66 books
// beats the majority class clearly and prints the bag-of-words baseline beside it; a run killed
// and resumed ends with the straight run's weights; flags that do not fit are refused naming the
// flag and the value. Every run is bounded by `timeout`.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>

#include "autograd/ops/ops.h"
#include "data/tokenizer.h"
#include "nn/checkpoint.h"
#include "tests/examples/example_program.h"

using namespace loom;
using namespace loom::testing_support;
namespace fs = std::filesystem;

namespace {

std::string fixture(const std::string& name) {
  const char* src = std::getenv("LOOM_SOURCE_DIR");
  return std::string(src && *src ? src : ".") + "/tests/data/tokenizers/" + name;
}

// About 40 KB of paragraphs of sentences from a small grammar (seeded), in words the KJV
// vocabulary knows: a masked word is partly predictable from its neighbours.
std::string grammar_text() {
  std::vector<std::string> who{"the lord", "moses", "the king", "the people", "his servant"};
  std::vector<std::string> did{"spake unto", "went unto", "sent", "blessed", "called"};
  std::vector<std::string> what{"the priest", "the city", "all israel", "the children"};
  std::vector<std::string> when{"in that day", "at even", "in the morning", "for ever"};
  std::mt19937 rng(7);
  std::string s;
  while (s.size() < 40000) {
    for (int i = 0; i < 4; ++i)
      s += who[rng() % 5] + " " + did[rng() % 5] + " " + what[rng() % 4] + " " + when[rng() % 4] +
           ".\n";
    s += "\n";
  }
  return s;
}

// Entropy in nats of the token frequencies of the text under the tokenizer.
double unigram_entropy(const std::string& text, const data::Tokenizer& tok) {
  std::map<int32_t, double> count;
  std::vector<int32_t> ids = tok.encode_ordinary(text);
  for (int32_t id : ids) count[id] += 1;
  double h = 0;
  for (auto& [id, n] : count) h -= n / double(ids.size()) * std::log(n / double(ids.size()));
  return h;
}

// 66 books of 10 verses ("Genesis 1" headings: here "Bk0 1" ... "Bk65 1"), each verse 8 words:
// a shared word with probability 0.5, else a word of its testament's pool (0.85) or the other's.
std::string testament_text() {
  std::vector<std::string> shared{"and", "the", "said", "unto", "them", "of", "he", "was"};
  std::vector<std::string> old_words{"israel", "moses", "king", "egypt", "priest", "david"};
  std::vector<std::string> new_words{"jesus", "disciples", "christ", "faith", "grace", "peter"};
  std::mt19937 rng(3);
  auto u = [&] { return double(rng()) / 4294967296.0; };
  std::string s;
  for (int book = 0; book < 66; ++book) {
    s += "Bk" + std::to_string(book) + " 1\n\n";
    const auto& own = book < 39 ? old_words : new_words;
    const auto& other = book < 39 ? new_words : old_words;
    for (int v = 1; v <= 10; ++v) {
      s += "  " + std::to_string(v);
      for (int w = 0; w < 8; ++w) {
        const auto& pool = u() < 0.5 ? shared : (u() < 0.85 ? own : other);
        s += " " + pool[rng() % pool.size()];
      }
      s += ".\n";
    }
    s += "\n";
  }
  return s;
}

std::string write(const fs::path& dir, const std::string& name, const std::string& text) {
  std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

// A tiny BERT (2 x 32) on 32-token examples, on the CPU.
std::string bert(const std::string& task, const std::string& text, const std::string& args,
                 const std::string& tokenizer = fixture("kjv_wordpiece.json")) {
  return std::string(TRAIN_BERT_BIN) + " --device cpu --workers 0 --model tiny --task " + task +
         " --text " + text + " --tokenizer " + tokenizer +
         " --seq-len 32 --batch-size 16 --lr 3e-3 --warmup 10 --dropout 0 --seed 5 " + args;
}

std::vector<double> numbers(const std::string& out, const std::string& re_text) {
  std::vector<double> v;
  std::regex re(re_text);
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

}  // namespace

TEST(TrainBert, PretrainingGoesWellBelowTheUnigramEntropyAndFineTuningBeatsTheMajority) {
  fs::path dir = fresh_temp_dir("bert_learns");
  std::string text = write(dir, "grammar.txt", grammar_text());
  auto tok = data::load_tokenizer(fixture("kjv_wordpiece.json"));
  const double h1 = unigram_entropy(grammar_text(), *tok);
  CommandRun r = run_command(
      bert("mlm", text, "--max-steps 150 --eval-every 75 --save-hf " + (dir / "hf").string()), 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto v = numbers(r.output, "val loss ([0-9.]+)");
  ASSERT_EQ(v.size(), 2u) << r.output;
  EXPECT_LT(v[1], 0.9 * h1) << "unigram entropy " << h1 << " nats\n" << r.output;
  EXPECT_LT(v[1], v[0]) << r.output;
  auto acc = numbers(r.output, "masked-token accuracy ([0-9.]+)\n");
  ASSERT_EQ(acc.size(), 2u) << r.output;
  EXPECT_GT(acc[1], 0.2) << r.output;  // chance: 1 in 3000
  EXPECT_TRUE(fs::exists(dir / "hf" / "config.json")) << r.output;
  std::printf("MLM validation loss %.4f nats, unigram entropy %.4f; masked-token accuracy %.3f\n",
              v[1], h1, acc[1]);

  // Fine-tuning from the pretrained folder on a 66-book text, with the baseline beside it.
  std::string kjv = write(dir, "books.txt", testament_text());
  CommandRun f = run_command(
      bert("testament", kjv,
           "--max-steps 120 --eval-every 120 --baseline-epochs 40 --baseline-lr 0.05 --init-from " +
               (dir / "hf").string()),
      120);
  ASSERT_EQ(f.exit_code, 0) << f.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      f.output, m,
      std::regex("validation accuracy: bert ([0-9.]+), bag-of-words ([0-9.]+), majority class "
                 "([0-9.]+)")))
      << f.output;
  const double bert_acc = std::stod(m[1]), bow = std::stod(m[2]), majority = std::stod(m[3]);
  EXPECT_NEAR(majority, 39.0 / 66.0, 0.05) << f.output;
  EXPECT_GT(bert_acc, majority + 0.2) << f.output;
  EXPECT_GT(bow, majority + 0.2) << f.output;
  std::printf("testament accuracy: bert %.3f, bag-of-words %.3f, majority %.3f\n", bert_acc, bow,
              majority);
  fs::remove_all(dir);
}

TEST(TrainBert, KilledAndResumedRunEqualsTheStraightRun) {
  fs::path dir = fresh_temp_dir("bert_resume"), a = dir / "a", b = dir / "b";
  std::string text = write(dir, "grammar.txt", grammar_text());
  std::string common =
      "--max-steps 30 --eval-every 15 --eval-examples 32 --checkpoint-every 10 "
      "--checkpoint-dir ";
  CommandRun straight = run_command(bert("mlm", text, common + a.string()), 120);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // The same run, killed with SIGKILL once its step-10 checkpoint exists, then resumed.
  std::string ckpt = (b / "ckpt-00000010.safetensors").string();
  CommandRun killed =
      run_command("sh -c '" + bert("mlm", text, common + b.string()) + " & pid=$!; while [ ! -e " +
                      ckpt + " ]; do sleep 0.02; done; kill -9 $pid; wait $pid'",
                  120);
  EXPECT_EQ(killed.exit_code, 137) << "the run must die by SIGKILL before it ends\n"
                                   << killed.output;
  CommandRun resumed = run_command(bert("mlm", text, common + b.string() + " --resume"), 120);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  EXPECT_EQ(max_weight_difference(a / "ckpt-00000030.safetensors", b / "ckpt-00000030.safetensors"),
            0.0);
  fs::remove_all(dir);
}

// Under loomrun with DDP over Gloo, two processes of 8 verses each end 10 fine-tuning steps with
// the weights of one process on the 16: the sampler splits each global batch between the ranks and
// DDP averages their gradients (float32 sums in another order: 1e-5 after 10 AdamW steps of lr
// 3e-3). (Not MLM: there each rank's loss is the mean over its own masked tokens, whose counts
// differ, so DDP's average of the ranks' means is not the batch's mean; measured 0.013 apart after
// 10 steps, as under PyTorch's DDP with transformers' loss.)
TEST(TrainBert, TwoProcessesUnderLoomrunEqualOne) {
  fs::path dir = fresh_temp_dir("bert_ddp"), one = dir / "one", two = dir / "two";
  std::string kjv = write(dir, "books.txt", testament_text());
  std::string common =
      "--max-steps 10 --eval-every 10 --eval-examples 32 --baseline-epochs 1 "
      "--checkpoint-dir ";
  CommandRun a = run_command(bert("testament", kjv, common + one.string()), 120);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CommandRun b = run_command(std::string(LOOMRUN_BIN) + " --standalone --nproc_per_node=2 " +
                                 bert("testament", kjv, common + two.string()),
                             180);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_LE(
      max_weight_difference(one / "ckpt-00000010.safetensors", two / "ckpt-00000010.safetensors"),
      1e-5);
  fs::remove_all(dir);
}

TEST(TrainBert, RefusesFlagsThatDoNotFitNamingThem) {
  fs::path dir = fresh_temp_dir("bert_refusals");
  std::string text = write(dir, "grammar.txt", grammar_text());
  CommandRun r = run_command(bert("poetry", text, "--max-steps 1"), 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--task"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("poetry"), std::string::npos) << r.output;

  r = run_command(bert("mlm", text, "--max-steps 1", fixture("kjv_bpe.json")), 30);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a WordPiece tokenizer"), std::string::npos) << r.output;

  fs::create_directories(dir / "gpt2");
  write(dir / "gpt2", "config.json", R"({"model_type": "gpt2", "n_embd": 32})");
  r = run_command(bert("mlm", text, "--max-steps 1 --init-from " + (dir / "gpt2").string()), 30);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--init-from " + (dir / "gpt2").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpt2"), std::string::npos) << r.output;

  r = run_command(bert("testament", text, "--max-steps 1"), 30);  // no books
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("books: the testament task needs"), std::string::npos) << r.output;
  fs::remove_all(dir);
}
