// Sampling from a causal LM (nn/gpt_sample.h): the logits of the last position come to the host,
// where temperature, top-k, top-p and the draw are a few lines of plain C++; the loop with the
// growing cache, without one, or through a GraphDecoder (the static cache, graphed or not).
// Leaves out: sampling on the device (one (V) read-back per token is small next to the forward;
// greedy decoding through the static cache reads back only the argmax).
#include "nn/gpt_sample.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "autograd/grad_mode.h"
#include "autograd/ops/ops.h"
#include "nn/graph_decode.h"

namespace loom::nn {

int64_t sample_token(const Tensor& logits, double temperature, int64_t top_k, double u,
                     double top_p) {
  LOOM_CHECK(logits.dim() == 1 && logits.numel() > 0, "sample_token: logits ", describe(logits),
             " should be one row (V)");
  LOOM_CHECK(temperature >= 0.0, "sample_token: temperature ", temperature, " is negative");
  LOOM_CHECK(top_p > 0.0 && top_p <= 1.0, "sample_token: top_p ", top_p, " is not in (0, 1]");
  Tensor host = contiguous(to(to(logits, kF64), kCPU));
  const double* l = host.data<double>();
  int64_t V = host.numel();
  if (temperature == 0.0) return int64_t(std::max_element(l, l + V) - l);
  // The top_k largest logits (all when top_k is 0 or >= V) in order, then softmax over them in
  // float64.
  std::vector<int64_t> ids(static_cast<size_t>(V), 0);
  for (int64_t i = 0; i < V; ++i) ids[size_t(i)] = i;
  int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int64_t a, int64_t b) { return l[a] > l[b]; });
  std::vector<double> p(static_cast<size_t>(k));
  double top = l[ids[0]], sum = 0.0;
  for (int64_t i = 0; i < k; ++i)
    sum += p[size_t(i)] = std::exp((l[ids[size_t(i)]] - top) / temperature);
  // The nucleus: the first n (most likely first) whose probabilities reach top_p of the total.
  if (top_p < 1.0) {
    double kept = 0.0;
    int64_t n = 0;
    while (n < k && kept < top_p * sum) kept += p[size_t(n++)];
    k = std::max<int64_t>(n, 1), sum = kept > 0.0 ? kept : p[0];
  }
  double target = u * sum, acc = 0.0;
  for (int64_t i = 0; i < k; ++i)
    if ((acc += p[size_t(i)]) > target) return ids[size_t(i)];
  return ids[size_t(k - 1)];  // u * sum rounded up to the total
}

namespace {

bool is_stop(const SampleOptions& o, int64_t id) {
  return std::find(o.stop_tokens.begin(), o.stop_tokens.end(), id) != o.stop_tokens.end();
}

// The loop through a GraphDecoder (the model in eval mode, without gradients): greedy tokens are
// the device's argmax, sampled ones drawn on the host from the step's logits with the same
// uniforms as the loop below.
std::vector<int64_t> generate_static(CausalLM& model, const std::vector<int64_t>& prompt,
                                     const SampleOptions& o, int64_t max_len) {
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  GraphDecoder decoder(model, max_len, o.cuda_graph);
  Tensor logits = decoder.prefill(prompt);  // (V)
  std::vector<int64_t> out;
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    const int64_t next = o.temperature == 0.0
                             ? decoder.greedy_token()
                             : sample_token(logits, o.temperature, o.top_k, uniform(rng), o.top_p);
    out.push_back(next);
    if (is_stop(o, next)) break;
    if (n + 1 < o.max_new_tokens) logits = decoder.step(next);
  }
  return out;
}

}  // namespace

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt,
                              const SampleOptions& o) {
  const int64_t context = model.max_context(), V = model.vocab_size();
  const int64_t P = int64_t(prompt.size());
  LOOM_CHECK(!prompt.empty(), "generate: the prompt is empty");
  LOOM_CHECK(P + o.max_new_tokens <= context, "generate: the prompt (", P, " tokens) and ",
             o.max_new_tokens, " new tokens exceed the context of ", context);
  const bool fixed = o.static_cache || o.cuda_graph;
  const int64_t max_len = o.max_len > 0 ? o.max_len : P + o.max_new_tokens;
  LOOM_CHECK(!fixed || P + o.max_new_tokens <= max_len, "generate: the prompt (", P,
             " tokens) and ", o.max_new_tokens, " new tokens exceed the static cache's max_len of ",
             max_len);
  for (int64_t id : prompt)
    LOOM_CHECK(id >= 0 && id < V, "generate: prompt token ", id, " is outside the vocabulary [0, ",
               V, ")");
  Device dev = model.device();
  bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  if (fixed) {
    std::vector<int64_t> out = generate_static(model, prompt, o, max_len);
    model.train(was_training);
    return out;
  }
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  auto ids_tensor = [&](const std::vector<int64_t>& ids) {
    Tensor t = empty({1, int64_t(ids.size())}, {.dtype = kI64});
    std::copy(ids.begin(), ids.end(), t.data<int64_t>());
    return to(t, dev);
  };
  std::vector<int64_t> all = prompt, out;
  KVCache cache;
  Tensor logits = o.use_cache ? model.forward(ids_tensor(prompt), cache) : Tensor();
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    if (!o.use_cache) logits = model.forward(ids_tensor(all));          // the whole prefix again
    Tensor last = select(select(logits, 0, 0), 0, logits.size(1) - 1);  // (V)
    int64_t next = sample_token(last, o.temperature, o.top_k, uniform(rng), o.top_p);
    out.push_back(next);
    all.push_back(next);
    if (is_stop(o, next)) break;
    if (o.use_cache && n + 1 < o.max_new_tokens) logits = model.forward(ids_tensor({next}), cache);
  }
  model.train(was_training);
  return out;
}

}  // namespace loom::nn
