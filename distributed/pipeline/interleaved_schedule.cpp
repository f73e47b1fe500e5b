// Each rank's order of actions for GPipe, 1F1B and interleaved 1F1B (Note [Interleaved 1F1B] in
// distributed/pipeline/interleaved_schedule.h), and the simulated timeline that checks an order.
// Leaves out: the sends and receives (schedule.cpp).
#include "distributed/pipeline/interleaved_schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "core/error.h"

namespace loom::distributed {

namespace {

// Megatron's order (Note [Interleaved 1F1B]): forward and backward k of the M V a rank runs.
std::vector<PipelineAction> interleaved(int S, int V, int M, int rank) {
  LOOM_CHECK(V >= 2, "pipeline: the interleaved schedule takes 2 or more virtual stages per rank ",
             "(--pp-virtual-stages), got ", V);
  LOOM_CHECK(S >= 2, "pipeline: the interleaved schedule needs 2 or more stages (--pp), got ", S);
  LOOM_CHECK(M % S == 0, "pipeline: the interleaved schedule runs the micro-batches in groups of ",
             "the ", S, " stages; ", M, " micro-batches (--grad-accum ", M,
             ") are not a multiple of --pp ", S);
  const int total = M * V, group = S * V;
  auto at = [&](int k, bool forward) {
    const int in_group = k % group;
    const int v = in_group / S;
    return PipelineAction{forward, forward ? v : V - 1 - v, (k / group) * S + in_group % S};
  };
  const int warmup = std::min(total, 2 * (S - rank - 1) + (V - 1) * S);
  std::vector<PipelineAction> out;
  for (int k = 0; k < warmup; ++k) out.push_back(at(k, true));
  for (int i = 0; i < total - warmup; ++i)
    out.push_back(at(warmup + i, true)), out.push_back(at(i, false));
  for (int k = total - warmup; k < total; ++k) out.push_back(at(k, false));
  return out;
}

}  // namespace

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int S, int V, int M,
                                             int rank) {
  LOOM_CHECK(S >= 1 && rank >= 0 && rank < S && M >= 1, "pipeline: rank ", rank, " of ", S,
             " stages with ", M, " micro-batches");
  if (schedule == PipelineSchedule::Interleaved) return interleaved(S, V, M, rank);
  LOOM_CHECK(V == 1, "pipeline: ", V, " virtual stages per rank (--pp-virtual-stages) need ",
             "--pp-schedule interleaved; GPipe and 1F1B run one stage per rank");
  std::vector<PipelineAction> out;
  auto f = [&out](int m) { out.push_back({true, 0, m}); };
  auto b = [&out](int m) { out.push_back({false, 0, m}); };
  if (schedule == PipelineSchedule::GPipe) {
    for (int m = 0; m < M; ++m) f(m);
    for (int m = 0; m < M; ++m) b(m);
    return out;
  }
  const int warmup = std::min(S - rank - 1, M);  // 1F1B: fill, steady state, drain
  for (int m = 0; m < warmup; ++m) f(m);
  for (int i = 0; i < M - warmup; ++i) f(warmup + i), b(i);
  for (int m = M - warmup; m < M; ++m) b(m);
  return out;
}

PipelineTimeline simulate_pipeline(const std::vector<std::vector<PipelineAction>>& orders, int V,
                                   int M) {
  const int S = int(orders.size()), C = S * V;
  std::map<std::tuple<bool, int, int>, int> done;  // (forward, model chunk, m) -> finish time
  PipelineTimeline tl;
  tl.start.resize(size_t(S));
  std::vector<size_t> next(size_t(S), 0);
  std::vector<int> free_at(size_t(S), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < S; ++r) {
      const auto& order = orders[size_t(r)];
      if (next[size_t(r)] == order.size()) continue;
      const PipelineAction& a = order[next[size_t(r)]];
      const int c = a.chunk * S + r, m = a.micro_batch;
      LOOM_CHECK(a.chunk >= 0 && a.chunk < V && m >= 0 && m < M, "simulate_pipeline: rank ", r,
                 " runs chunk ", a.chunk, " of ", V, ", micro-batch ", m, " of ", M);
      int ready = free_at[size_t(r)];
      std::vector<std::tuple<bool, int, int>> needs;
      if (a.forward && c > 0) needs.emplace_back(true, c - 1, m);
      if (!a.forward) needs.emplace_back(true, c, m);
      if (!a.forward && c < C - 1) needs.emplace_back(false, c + 1, m);
      bool can = true;
      for (const auto& n : needs) {
        auto it = done.find(n);
        if (it == done.end()) can = false;
        if (can) ready = std::max(ready, it->second);
      }
      if (!can) continue;
      tl.start[size_t(r)].push_back(ready);
      free_at[size_t(r)] = ready + 1;
      done[{a.forward, c, m}] = ready + 1;
      tl.length = std::max(tl.length, ready + 1);
      ++next[size_t(r)], moved = true;
    }
  }
  for (int r = 0; r < S && tl.deadlock.empty(); ++r)
    if (const size_t i = next[size_t(r)]; i < orders[size_t(r)].size()) {
      const PipelineAction& a = orders[size_t(r)][i];
      tl.deadlock = "rank " + std::to_string(r) + " waits forever at action " + std::to_string(i) +
                    (a.forward ? " (forward" : " (backward") + " of micro-batch " +
                    std::to_string(a.micro_batch) + " through chunk " +
                    std::to_string(a.chunk * S + r) + ")";
    }
  return tl;
}

}  // namespace loom::distributed
