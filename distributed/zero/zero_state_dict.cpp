// ZeroOptimizer's state dict: the shards' state gathered into the unsharded layout of Note
// [Optimizer state layout] (what the program's optimizer would save without ZeRO), and a whole
// state dict sliced into this rank's shard. That is what makes N-to-M resume work: a checkpoint
// never depends on how many ranks wrote it. Leaves out: one file per rank (the gathered state is
// as large as an unsharded run's; stage 3 will need per-rank files).
#include <algorithm>
#include <map>

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"
#include "distributed/zero/zero_optimizer.h"

namespace loom::distributed {

namespace {
constexpr size_t kNone = size_t(-1);

Tensor flat_range(const Tensor& t, int64_t offset, int64_t n) {
  return make_view(t, {n}, {1}, t.offset() + offset);
}

// "state.12.exp_avg" -> {"state", 12, "exp_avg"}; false when the key has another form.
bool parse_key(const std::string& key, std::string& kind, size_t& index, std::string& name) {
  size_t a = key.find('.'), b = a == std::string::npos ? a : key.find('.', a + 1);
  if (b == std::string::npos || b == a + 1 || b - a - 1 > 9) return false;
  std::string num = key.substr(a + 1, b - a - 1);
  if (!std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  kind = key.substr(0, a), index = size_t(std::stoul(num)), name = key.substr(b + 1);
  return kind == "state" || kind == "param_groups";
}
}  // namespace

// Buffer `buffer` (or the parameter, for "") of every segment of bucket b, laid out as this
// rank's shard of the bucket; zeros where a segment has no such buffer.
Tensor ZeroOptimizer::shard_of(size_t b, const std::string& buffer) const {
  const Bucket& bucket = reducer_.buckets()[b];
  Tensor out = zeros({bucket.numel / pg_.size()},
                     {.dtype = bucket.shard.dtype(), .device = bucket.shard.device()});
  for (size_t k = 0; k < segs_.size(); ++k) {
    if (segs_[k].bucket != b) continue;
    Tensor src = views_[k];
    if (!buffer.empty()) {
      const size_t n = inner_of_seg_[k];
      const auto names = inner_->buffer_names(group_of_full_[full_of_seg(k)]);
      const auto it = std::find(names.begin(), names.end(), buffer);
      const auto& bufs = inner_->state(n).buffers;
      if (it == names.end() || size_t(it - names.begin()) >= bufs.size()) continue;
      src = bufs[size_t(it - names.begin())];
    }
    flat_range(out, segs_[k].shard_offset, segs_[k].numel).copy_(src);
  }
  return out;
}

// The whole bucket b of `buffer` from every rank's shard, in CPU memory.
Tensor ZeroOptimizer::gather_bucket(size_t b, const std::string& buffer) const {
  Tensor mine = shard_of(b, buffer);
  if (pg_.size() == 1) return mine.to(kCPU);
  Tensor whole =
      empty({reducer_.buckets()[b].numel}, {.dtype = mine.dtype(), .device = mine.device()});
  pg_.all_gather(whole, mine)->wait();
  return whole.to(kCPU);
}

nn::StateDict ZeroOptimizer::state_dict() const {
  autograd::NoGradGuard no_grad;
  const size_t P = reducer_of_full_.size();
  const auto& rp = reducer_.params();
  // Which parameters have state, at which step, over all ranks: [has state (P), step (P)].
  std::vector<double> known(2 * P, 0.0);
  for (size_t k = 0; k < segs_.size(); ++k) {
    const optim::ParamState& st = inner_->state(inner_of_seg_[k]);
    if (!st.initialized()) continue;
    known[full_of_seg(k)] = 1.0;
    known[P + full_of_seg(k)] = std::max(known[P + full_of_seg(k)], double(st.step));
  }
  Tensor t = from_vector(known, {int64_t(2 * P)}).to(rp.at(0).device());
  if (pg_.size() > 1) pg_.all_reduce(t, ReduceOp::Max)->wait();
  known = t.to(kCPU).to_vector<double>();

  // Each state buffer, gathered bucket by bucket.
  std::vector<std::map<std::string, Tensor>> gathered(P);
  for (size_t b = 0; b < reducer_.buckets().size(); ++b) {
    const Bucket& bucket = reducer_.buckets()[b];
    std::vector<std::string> names;  // the buffers some parameter with state here has
    for (size_t j : bucket.params)
      if (size_t i = full_of_reducer_[j]; i != kNone && known[i] > 0)
        for (const auto& n : inner_->buffer_names(group_of_full_[i]))
          if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    for (const auto& n : names) {
      Tensor whole = gather_bucket(b, n);
      for (size_t k = 0; k < bucket.params.size(); ++k) {
        const size_t i = full_of_reducer_[bucket.params[k]];
        if (i == kNone || known[i] == 0) continue;
        const Tensor& p = rp[bucket.params[k]];
        Tensor e = empty(p.shape(), {.dtype = whole.dtype()});  // the shard's (FSDP: fp32)
        flat_range(e, 0, p.numel()).copy_(flat_range(whole, bucket.offsets[k], p.numel()));
        gathered[i][n] = e;
      }
    }
  }

  // The unsharded layout, in the order Optimizer::state_dict writes it.
  nn::StateDict sd;
  for (size_t i = 0; i < P; ++i) {
    if (known[i] == 0) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    if (inner_->counts_steps()) sd.emplace_back(prefix + "step", nn::scalar_entry(known[P + i]));
    for (const auto& n : inner_->buffer_names(group_of_full_[i]))
      sd.emplace_back(prefix + n, gathered[i].at(n));
  }
  for (size_t g = 0, first = 0; g < full_.num_param_groups(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    std::vector<int64_t> idx(full_.params(g).size());
    for (size_t k = 0; k < idx.size(); ++k) idx[k] = int64_t(first + k);
    first += idx.size();
    sd.emplace_back(prefix + "params", from_vector(idx, {int64_t(idx.size())}));
    for (const auto& [h, v] : inner_->hyper_parameters(g))
      sd.emplace_back(prefix + h, nn::scalar_entry(v));
  }
  return sd;
}

void ZeroOptimizer::load_state_dict(const nn::StateDict& sd) {
  const size_t P = reducer_of_full_.size(), G = full_.num_param_groups();
  const auto& rp = reducer_.params();
  std::vector<std::map<std::string, Tensor>> per_param(P);
  std::vector<bool> has_params(G, false);
  std::vector<std::string> problems;
  nn::StateDict inner;
  for (const auto& [key, t] : sd) {
    std::string kind, name;
    size_t i = 0;
    const bool ok = parse_key(key, kind, i, name) && i < (kind == "state" ? P : G);
    if (!ok) {
      problems.push_back("unexpected entry \"" + key + "\"");
    } else if (kind == "state") {
      const Tensor& p = rp[reducer_of_full_[i]];
      if (name != "step" && (!t.defined() || t.numel() != p.numel()))
        problems.push_back(str("\"", key, "\" has shape ", t.defined() ? str(t.shape()) : "?", ", ",
                               describe_param(i), " has ", p.shape()));
      per_param[i][name] = t;
    } else if (name == "params") {
      has_params[i] = t.defined() && t.numel() == int64_t(full_.params(i).size());
      if (!has_params[i])
        problems.push_back(str("\"", key, "\" does not list group ", i, "'s ",
                               full_.params(i).size(), " parameters"));
    } else {
      inner.emplace_back(key, t);  // a hyper-parameter: the shard's optimizer checks it
    }
  }
  if (!problems.empty()) {
    std::string msg;
    for (const auto& s : problems) msg += "\n  " + s;
    LOOM_FAIL(name(), ".load_state_dict: the state dict does not match this optimizer:", msg);
  }
  // This rank's slices, renumbered for the shard's optimizer.
  std::vector<std::vector<int64_t>> inner_params(G);
  for (size_t k = 0; k < segs_.size(); ++k) {
    const size_t i = full_of_seg(k), n = inner_of_seg_[k];
    inner_params[group_of_full_[i]].push_back(int64_t(n));
    const std::string prefix = "state." + std::to_string(n) + ".";
    for (const auto& [name, t] : per_param[i])
      inner.emplace_back(
          prefix + name,
          name == "step" ? t : flat_range(t.contiguous(), segs_[k].param_offset, segs_[k].numel));
  }
  for (size_t g = 0; g < G; ++g)
    if (has_params[g])
      inner.emplace_back("param_groups." + std::to_string(g) + ".params",
                         from_vector(inner_params[g], {int64_t(inner_params[g].size())}));
  inner_->load_state_dict(inner);
  for (size_t g = 0; g < G; ++g)
    for (const auto& [h, v] : inner_->hyper_parameters(g)) full_.set_hyper_parameter(g, h, v);
}

}  // namespace loom::distributed
