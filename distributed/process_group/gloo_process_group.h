// GlooProcessGroup: the CPU backend over Debian's Gloo (TCP transport), rendezvous through loom's
// store. Collectives run in order on one worker thread per group; send/recv are posted at once.
// Leaves out: CUDA tensors (NCCL's job: an error naming the device) and Gloo's ibverbs transport.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/process_group/process_group.h"

namespace gloo {
class Context;
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace loom::distributed {

class GlooProcessGroup : public ProcessGroup {
 public:
  // hostname: the address other ranks reach this one at (127.0.0.1 on one machine). Blocks until
  // every member has joined (the rendezvous), at most the store's timeout.
  GlooProcessGroup(int rank, int size, std::shared_ptr<Store> store, Millis timeout,
                   const std::string& hostname);
  ~GlooProcessGroup() override;
  std::string backend() const override { return "gloo"; }

 protected:
#define LOOM_PROCESS_GROUP_METHOD(name, params) std::shared_ptr<Work> name params override;
#include "distributed/process_group/process_group_methods.inc"
#undef LOOM_PROCESS_GROUP_METHOD
  void check_device(const char* op, const Tensor& t) const override;

 private:
  struct Job {
    std::function<void()> run;
    OpRecord rec;
    std::shared_ptr<CompletionWork> work;
  };
  std::shared_ptr<Work> enqueue(std::deque<Job>& queue, OpRecord rec, std::function<void()> run);
  void worker(std::deque<Job>& queue);
  void run_job(Job& job);
  // send (or recv) t's bytes to (from) peer: posted now, waited for on the send (recv) thread.
  std::shared_ptr<Work> p2p(const Tensor& t, bool send, int peer, int tag, const OpRecord& rec);

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> collectives_;  // run in order by collective_thread_
  // Posted sends and recvs, each waited for in order by its own thread: a recv never waits
  // behind a send whose peer posts its recv later (a pipeline's async sends, blocking recvs).
  std::deque<Job> send_waits_, recv_waits_;
  bool stop_ = false;
  std::string broken_;  // the first failure: every later op fails with it
  std::thread collective_thread_, send_thread_, recv_thread_;
};

}  // namespace loom::distributed
