// loom's package test: a user's program that sees loom only through <loom/loom.h> and loom::loom.
// Trains a small regression model for a few Adam steps on random data (the loss must fall), then
// writes its weights to a safetensors file, reads them into a fresh model and checks every value;
// and encodes a text with a byte-level BPE (its regex runs on PCRE2, which the package links) and
// with a WordPiece vocabulary (its normalizer's Unicode comes from utf8proc, linked the same way).
// Prints what it checked; exits 1 on the first failure.
#include <loom/loom.h>

#include <cstdio>
#include <filesystem>
#include <string>

using namespace loom;

namespace {
int fail(const std::string& what) {
  std::fprintf(stderr, "consumer: FAILED: %s\n", what.c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  std::string dir = argc > 1 ? argv[1] : std::filesystem::temp_directory_path().string();
  manual_seed(0);
  // y = x . (1, -2, 3, 0.5) + 1 for 64 random rows of 4 features.
  Tensor x = randn({64, 4});
  Tensor y = matmul(x, from_vector<float>({1, -2, 3, 0.5f}, {4, 1})) + 1.0;
  auto model = nn::make<nn::Sequential>(nn::make<nn::Linear>(4, 16), nn::make<nn::ReLU>(),
                                        nn::make<nn::Linear>(16, 1));
  optim::Adam opt(model->parameters(), {.lr = 1e-2});
  const nn::MSELoss mse;
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = mse(model(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  std::printf("consumer: loom %s, mse %.4f -> %.4f after 200 Adam steps\n", LOOM_VERSION, first,
              last);
  if (!(last < 0.05 * first)) return fail("the loss did not fall to 5% of its first value");

  std::string path = dir + "/consumer_model.safetensors";
  save_safetensors(path, model->named_parameters(), {{"written_by", "consumer"}});
  auto file = load_safetensors(path);
  auto fresh = nn::make<nn::Sequential>(nn::make<nn::Linear>(4, 16), nn::make<nn::ReLU>(),
                                        nn::make<nn::Linear>(16, 1));
  fresh->load_state_dict(file.tensors);
  if (file.metadata.at("written_by") != "consumer") return fail("metadata did not round-trip");
  for (const auto& [name, p] : model->named_parameters()) {
    auto a = p.to_vector<float>(), b = file.at(name).to_vector<float>();
    if (a != b) return fail("tensor " + name + " changed in the file");
  }
  auto want = model(x).to_vector<float>(), got = fresh(x).to_vector<float>();
  if (want != got) return fail("the reloaded model computes other values");
  std::printf("consumer: %zu tensors written to %s and read back exactly\n", file.tensors.size(),
              path.c_str());
  std::filesystem::remove(path);

  // A BPE of the 256 bytes and " w" on GPT-2's regex: the pieces "hello", " world".
  data::BpeModel bpe;
  bpe.name = bpe.source = "consumer";
  for (int b = 0; b < 256; ++b) bpe.tokens.push_back(std::string(1, char(b)));
  bpe.tokens.push_back(" w");
  bpe.pattern = data::kGpt2Pattern;
  const data::BpeTokenizer tok(bpe);
  const std::vector<int32_t> ids = tok.encode("hello world");
  if (ids.size() != 10 || ids[5] != 256) return fail("the BPE did not merge \" w\"");
  if (tok.decode(ids) != "hello world") return fail("the BPE did not decode its ids back");
  std::printf("consumer: \"hello world\" is %zu BPE tokens and decodes back\n", ids.size());

  // WordPiece: "Héllo" lower-cased and without its accent (NFD through utf8proc), then "hell ##o".
  data::WordPieceModel wp;
  wp.name = wp.source = "consumer";
  wp.vocab = {{"[UNK]", 0}, {"hell", 1}, {"##o", 2}};
  const data::WordPieceTokenizer bert(wp);
  if (bert.encode("H\xC3\xA9llo") != std::vector<int32_t>{1, 2})
    return fail("WordPiece did not encode \"H\xC3\xA9llo\" as hell ##o");
  std::printf("consumer: \"H\xC3\xA9llo\" is WordPiece's hell ##o\n");
  return 0;
}
