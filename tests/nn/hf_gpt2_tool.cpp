// hf_gpt2_tool: the C++ half of the transformers interop test (tests/nn/hf_gpt2_interop.py).
//   hf_gpt2_tool resave <src> <dst> <keep|f32|bf16|f16> <max_shard_bytes>
//       load_hf_gpt2(src), then save_hf_gpt2 into dst in that dtype with that shard size
//   hf_gpt2_tool logits <dir> <id>...
//       the logits of one sequence (1, T) of ids, one float per line (9 digits: exact float32)
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops/ops.h"
#include "nn/hf_gpt2.h"

using namespace loom;
using namespace loom::nn;

namespace {

std::optional<DType> parse_dtype(const std::string& s) {
  if (s == "keep") return std::nullopt;
  if (s == "f32") return kF32;
  if (s == "bf16") return kBF16;
  if (s == "f16") return kF16;
  throw Error("hf_gpt2_tool: unknown dtype '" + s + "' (keep, f32, bf16, f16)");
}

int logits(const std::string& dir, const std::vector<int64_t>& ids) {
  auto model = load_hf_gpt2(dir);
  model->eval();
  NoGradGuard g;
  Tensor idx = from_vector(ids, {1, int64_t(ids.size())});
  for (float v : model->forward(idx).contiguous().to_vector<float>()) std::printf("%.9g\n", v);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  try {
    if (a.size() == 5 && a[0] == "resave") {
      auto model = load_hf_gpt2(a[1]);
      save_hf_gpt2(*model, a[2],
                   {.dtype = parse_dtype(a[3]), .max_shard_bytes = std::stoull(a[4])});
      return 0;
    }
    if (a.size() >= 3 && a[0] == "logits") {
      std::vector<int64_t> ids;
      for (size_t i = 2; i < a.size(); ++i) ids.push_back(std::stoll(a[i]));
      return logits(a[1], ids);
    }
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cerr << "usage: hf_gpt2_tool resave <src> <dst> <keep|f32|bf16|f16> <max_shard_bytes>\n"
               "       hf_gpt2_tool logits <dir> <id>...\n";
  return 2;
}
