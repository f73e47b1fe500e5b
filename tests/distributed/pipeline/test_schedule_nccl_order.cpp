// Why a pipeline's gradients travel on a second group under NCCL (Note [Two groups for a
// pipeline's messages] in distributed/pipeline/schedule.h), shown on a model of NCCL's ordering
// rather than on GPUs (a one-GPU machine cannot run two NCCL ranks): every rank's actions
// (pipeline_actions) become the operations the schedule's executor issues, in its order, on the
// streams NCCL runs them on, and a cycle in the graph of what waits for what is a deadlock.
// Leaves out: NCCL's buffering of small messages (a send is taken to complete only together with
// its receive, as one larger than NCCL's buffers does) and the collectives after the step.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "distributed/pipeline/interleaved_schedule.h"

using namespace loom::distributed;

namespace {

// The model. Each rank has a compute stream and one stream per process group; an operation waits
// for the one before it on its stream. As the executor (schedule.cpp's StageStep) issues them: a
// forward receives its input (not the first chunk), computes, sends its output (not the last
// chunk); a backward receives its output's gradient (not the last chunk), computes, sends its
// input's gradient (not the first). NCCL's process group makes each operation's stream wait for
// the compute issued before it (the ready event), and Work::wait() makes compute wait for a
// receive. The k-th send from rank a to rank b on a group is matched with b's k-th receive from a
// on that group (NCCL matches by order, not by tag), and the two complete together: one node.
class NcclOrderModel {
 public:
  // `two_groups`: the gradients on a group of their own (else both directions on one).
  NcclOrderModel(PipelineSchedule schedule, int S, int V, int M, bool two_groups)
      : S_(S), V_(V), two_(two_groups) {
    for (int r = 0; r < S; ++r)
      for (const PipelineAction& a : pipeline_actions(schedule, S, V, M, r)) issue(r, a);
    match();
  }

  // Whether some operation waits, through the others, for itself (a matched send and receive
  // counted as one operation).
  bool deadlocks() const {
    std::vector<std::vector<int>> waits(edges_.size());  // between representatives
    for (size_t n = 0; n < edges_.size(); ++n)
      for (int m : edges_[n])
        if (rep_[n] != rep_[size_t(m)]) waits[size_t(rep_[n])].push_back(rep_[size_t(m)]);
    std::vector<int> state(edges_.size(), 0);  // 0 new, 1 on the path, 2 done
    for (size_t n = 0; n < edges_.size(); ++n)
      if (state[n] == 0 && cycle_from(waits, int(n), state)) return true;
    return false;
  }

 private:
  enum Stream { kCompute = 0, kActivations = 1, kGradients = 2 };
  struct Op {
    int rank, peer;
    bool send;
  };

  void issue(int r, const PipelineAction& a) {
    const int c = a.chunk * S_ + r, last = S_ * V_ - 1;
    const Stream group = a.forward || !two_ ? kActivations : kGradients;
    const bool receives = a.forward ? c > 0 : c < last, sends = a.forward ? c < last : c > 0;
    const int from = a.forward ? (c - 1 + S_) % S_ : (c + 1) % S_;
    const int to = a.forward ? (c + 1) % S_ : (c - 1 + S_) % S_;
    int recv = -1;
    if (receives) recv = comm(r, group, {r, from, false});
    const int compute = node(r, kCompute);
    if (recv >= 0) edge(recv, compute);  // Work::wait(): compute waits for the receive
    if (sends) comm(r, group, {r, to, true});
  }

  // An operation on a group's stream: after the compute issued before it (the ready event).
  int comm(int r, Stream s, const Op& op) {
    const int n = node(r, s);
    if (auto it = last_.find({r, kCompute}); it != last_.end()) edge(it->second, n);
    (op.send ? sends_ : recvs_)[{s, op.send ? r : op.peer, op.send ? op.peer : r}].push_back(n);
    return n;
  }

  int node(int r, Stream s) {
    const int n = int(edges_.size());
    edges_.emplace_back();
    rep_.push_back(n);
    if (auto it = last_.find({r, s}); it != last_.end()) edge(it->second, n);
    last_[{r, s}] = n;
    return n;
  }

  void edge(int from, int to) { edges_[size_t(from)].push_back(to); }

  // A matched send and receive complete together: the receive is represented by the send.
  void match() {
    for (const auto& [key, sends] : sends_) {
      const std::vector<int>& recvs = recvs_.at(key);
      ASSERT_EQ(sends.size(), recvs.size());
      for (size_t k = 0; k < sends.size(); ++k) rep_[size_t(recvs[k])] = sends[k];
    }
  }

  static bool cycle_from(const std::vector<std::vector<int>>& waits, int n,
                         std::vector<int>& state) {
    state[size_t(n)] = 1;
    for (int m : waits[size_t(n)]) {
      if (state[size_t(m)] == 1) return true;
      if (state[size_t(m)] == 0 && cycle_from(waits, m, state)) return true;
    }
    state[size_t(n)] = 2;
    return false;
  }

  int S_, V_;
  bool two_;
  std::vector<std::vector<int>> edges_;      // what each operation waits for -> it
  std::vector<int> rep_;                     // a receive's matched send, else itself
  std::map<std::pair<int, int>, int> last_;  // (rank, stream) -> its last node
  std::map<std::tuple<int, int, int>, std::vector<int>> sends_, recvs_;  // (group, from, to)
};

}  // namespace

// The deadlock the second group removes: 1F1B with 2 micro-batches on 2 ranks, both directions on
// one stream (stage 0: send a1, then receive g0; stage 1: send g0, then receive a1).
TEST(NcclOrder, OneFOneBOnOneGroupDeadlocksFromTwoMicroBatches) {
  for (int S : {2, 3, 4, 8}) {
    EXPECT_FALSE(NcclOrderModel(PipelineSchedule::OneFOneB, S, 1, 1, false).deadlocks()) << S;
    for (int M : {2, 4, 8, 16})
      EXPECT_TRUE(NcclOrderModel(PipelineSchedule::OneFOneB, S, 1, M, false).deadlocks())
          << "S " << S << " M " << M;
  }
}

TEST(NcclOrder, OneFOneBAndGPipeWithTheGradientsOnASecondGroupNeverDeadlock) {
  for (PipelineSchedule schedule : {PipelineSchedule::OneFOneB, PipelineSchedule::GPipe})
    for (int S : {2, 3, 4, 8})
      for (int M : {1, 2, 3, 4, 8, 16})
        EXPECT_FALSE(NcclOrderModel(schedule, S, 1, M, true).deadlocks())
            << (schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b") << " S " << S << " M " << M;
  // GPipe never crosses a send and a receive, so one group is enough for it.
  EXPECT_FALSE(NcclOrderModel(PipelineSchedule::GPipe, 4, 1, 8, false).deadlocks());
}

// Why the interleaved schedule stays refused on NCCL: its chunks' messages wrap round the ranks and
// cross even with the gradients on a group of their own.
TEST(NcclOrder, InterleavedStillDeadlocksWithTwoGroups) {
  for (int S : {2, 4})
    for (int V : {2, 3})
      EXPECT_TRUE(NcclOrderModel(PipelineSchedule::Interleaved, S, V, 2 * S, true).deadlocks())
          << "S " << S << " V " << V;
}
