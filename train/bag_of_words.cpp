// The bag-of-words baseline. See bag_of_words.h.
#include "train/bag_of_words.h"

#include <algorithm>
#include <random>
#include <vector>

#include "autograd/ops/ops.h"
#include "core/error.h"
#include "nn/layers.h"
#include "nn/optim/adam.h"

namespace loom::train {

Tensor term_frequencies(const Tensor& rows, int64_t vocab_size) {
  LOOM_CHECK(rows.dim() == 3 && rows.size(1) == 3,
             "term_frequencies: expected (B, 3, T) rows, got ", describe(rows));
  const int64_t B = rows.size(0), T = rows.size(2);
  std::vector<int64_t> h = rows.to(kCPU).contiguous().to_vector<int64_t>();
  std::vector<float> tf(size_t(B * vocab_size), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* ids = h.data() + b * 3 * T;
    const int64_t* mask = ids + 2 * T;
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) n += mask[t] != 0;
    for (int64_t t = 0; t < T; ++t) {
      if (mask[t] == 0) continue;
      LOOM_CHECK(ids[t] >= 0 && ids[t] < vocab_size, "term_frequencies: id ", ids[t], " of row ", b,
                 " is outside the vocabulary of ", vocab_size);
      tf[size_t(b * vocab_size + ids[t])] += 1.0f / float(n);
    }
  }
  return from_vector(tf, {B, vocab_size}).to(rows.device());
}

namespace {

double accuracy(nn::Linear& model, const data::TensorDataset& set, const BagOfWordsOptions& o) {
  NoGradGuard no_grad;
  int64_t right = 0;
  for (int64_t start = 0; start < set.size(); start += 1024) {
    const int64_t end = std::min(set.size(), start + 1024);
    Tensor x = term_frequencies(set.data().slice(0, start, end).to(o.device), o.vocab_size);
    Tensor y = set.target().slice(0, start, end).to(o.device);
    right += int64_t(eq(argmax(model(x), -1), y).to(kF64).sum().item());
  }
  return double(right) / double(std::max<int64_t>(1, set.size()));
}

}  // namespace

BagOfWordsResult train_bag_of_words(const data::TensorDataset& train,
                                    const data::TensorDataset& val, const BagOfWordsOptions& o) {
  manual_seed(o.seed);
  nn::Linear model(o.vocab_size, o.num_labels);
  model.to(o.device);
  optim::AdamW opt(model.parameters(), {.lr = o.lr, .weight_decay = o.weight_decay});
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> order(size_t(train.size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    for (size_t start = 0; start + size_t(o.batch_size) <= order.size(); start += o.batch_size) {
      std::vector<int64_t> idx(order.begin() + std::ptrdiff_t(start),
                               order.begin() + std::ptrdiff_t(start + size_t(o.batch_size)));
      Tensor index = from_vector(idx, {o.batch_size}).to(train.data().device());
      Tensor x = term_frequencies(index_select(train.data(), 0, index).to(o.device), o.vocab_size);
      Tensor y = index_select(train.target(), 0, index).to(o.device);
      opt.zero_grad();
      cross_entropy(model(x), y).backward();
      opt.step();
    }
  }
  return {accuracy(model, train, o), accuracy(model, val, o)};
}

}  // namespace loom::train
