// The job's world: init_process_group (reads the job from the environment, connects the store,
// builds the world group), world(), is_initialized, new_group (sub-groups of world ranks),
// destroy_process_group, and make_process_group (a group of a named backend, built directly).
// The state behind them is one process-wide record (world.cpp). Leaves out: the collectives
// themselves (process_group.h and the transports) and the store's protocol (store/tcp_store.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/process_group/process_group.h"
#include "distributed/store/store.h"

namespace loom::distributed {

// ---------------------------------------------------------------- starting a job
struct InitOptions {
  // "nccl", "gloo", or "auto": NCCL when loom has it and a GPU is present, else Gloo.
  std::string backend = "auto";
  Millis timeout = std::chrono::minutes(10);  // every collective's timeout
  // The store to rendezvous through. Null: rank 0 serves a TCPStore on MASTER_ADDR:MASTER_PORT
  // and the others connect, unless LOOM_STORE_EXTERNAL=1 (the launcher serves it: every rank
  // connects). Store connections wait up to store_timeout for the server.
  std::shared_ptr<Store> store;
  Millis store_timeout = std::chrono::minutes(5);
  int device = -1;  // NCCL: the CUDA device (default LOCAL_RANK % device_count())
};

// Reads the job from the environment (distributed/env.h), connects the store and builds the world
// group; every process of the job calls it once. A world of one needs no store or network.
// With NCCL it makes the rank's device current (cuda::set_device), as PyTorch users do by hand.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});
bool is_initialized();
std::shared_ptr<ProcessGroup> world();  // the group init_process_group made (an error before)
// A sub-group of world ranks `ranks` with its own communicator and store prefix. Every process of
// the world calls it, in the same order, with the same ranks; members get the group, others null.
// A member's rank in the group is its position among the sorted `ranks`. backend "" uses the
// world's; timeout 0 uses the world's.
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, Millis timeout = Millis(0),
                                        const std::string& backend = "");
void destroy_process_group();  // drops the world group and the store (rank 0 stops serving)

// Builds a group directly (tests, benchmarks): backend "gloo" or "nccl" over `store`.
std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int rank, int size,
                                                 std::shared_ptr<Store> store, Millis timeout,
                                                 int device = -1);

}  // namespace loom::distributed
