// Explaining an NCCL failure: the call, NCCL's own words, where (rank, world, device, NCCL's
// version), advice for the result code, and what to look at next (Note [Explaining NCCL errors]).
// Compiled in every build without nccl.h (result codes are ints with ncclResult_t's values), so it
// is tested without a GPU. Leaves out: calling NCCL (nccl_process_group.cpp does, then passes the
// strings here).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace loom::distributed {

// ncclResult_t's values (nccl.h; nccl_process_group.cpp checks they match).
enum NcclResultCode : int {
  kNcclSuccess = 0,
  kNcclUnhandledCudaError = 1,
  kNcclSystemError = 2,
  kNcclInternalError = 3,
  kNcclInvalidArgument = 4,
  kNcclInvalidUsage = 5,
  kNcclRemoteError = 6,
  kNcclInProgress = 7,
};

// Note [Explaining NCCL errors]
// NCCL's own text for a failure is short ("unhandled system error"); the reason is in
// ncclGetLastError and, with NCCL_DEBUG=WARN, on stderr. So every failed NCCL call raises one
// message with: the call as written; ncclGetErrorString and ncclGetLastError; the rank, the
// world (the peers the communicator spans), the device and NCCL's version; advice for the
// result code (nccl_result_advice); the next steps that apply to every code (NCCL_DEBUG,
// versions compared across ranks with envinfo, NCCL_P2P_DISABLE / NCCL_SHM_DISABLE /
// NCCL_IB_DISABLE to isolate a transport); and the NCCL_* variables this process has set.
struct NcclFailure {
  std::string call;          // "ncclCommInitRank(&comm, size, id, rank)", or the op for async
  int result = 0;            // its ncclResult_t
  std::string error_string;  // ncclGetErrorString(result)
  std::string last_error;    // ncclGetLastError(comm): often the real reason; may be empty
  int rank = -1;
  int world = 0;  // ranks in the communicator
  int device = -1;
  int nccl_version = 0;  // ncclGetVersion's code; 0: unknown
};

std::string explain_nccl_error(const NcclFailure& f);

// What a result code means and what usually causes it (one sentence or two).
std::string nccl_result_advice(int result);

// The NCCL_* variables set in this process, sorted by name: {"NCCL_DEBUG", "WARN"}, ...
std::vector<std::pair<std::string, std::string>> nccl_environment();

// The variables that most often change NCCL's behaviour, in the order envinfo prints them.
const std::vector<std::string>& nccl_key_variables();

}  // namespace loom::distributed
