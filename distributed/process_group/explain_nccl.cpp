// The text of an NCCL failure (Note [Explaining NCCL errors] in explain_nccl.h). Compiled in
// every build. Leaves out: NCCL itself (the caller passes its strings).
#include "distributed/process_group/explain_nccl.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cuda/device_info.h"
#include "core/error.h"

extern char** environ;

namespace loom::distributed {

std::string nccl_result_advice(int result) {
  switch (result) {
    case kNcclUnhandledCudaError:
      return "ncclUnhandledCudaError: a CUDA call inside NCCL failed. Usual causes: an earlier "
             "CUDA error on this device (a kernel's illegal memory access surfaces here; rerun "
             "with CUDA_LAUNCH_BLOCKING=1 to find it), GPU memory too full for NCCL's buffers, or "
             "a driver too old for this NCCL";
    case kNcclSystemError:
      return "ncclSystemError: a system call failed (a socket, shared memory, a file). Usual "
             "causes: a rank cannot reach another (a firewall, or the wrong interface: set "
             "NCCL_SOCKET_IFNAME to the one the nodes share), /dev/shm too small in a container "
             "(docker --shm-size; NCCL_SHM_DISABLE=1 tells), too few file descriptors (ulimit "
             "-n), or a peer that exited";
    case kNcclInternalError:
      return "ncclInternalError: an internal check of NCCL failed: a bug in NCCL, memory the "
             "program corrupted, or ranks running different NCCL versions";
    case kNcclInvalidArgument:
      return "ncclInvalidArgument: an argument was invalid (a buffer on another device than the "
             "communicator's, a null pointer, a peer outside the communicator); loom checks "
             "tensors before the call, so this is likely a bug in loom: report it with NCCL's "
             "NCCL_DEBUG=WARN line";
    case kNcclInvalidUsage:
      return "ncclInvalidUsage: the ranks disagree or the call was misused. Usual causes: two "
             "ranks on one GPU (check LOCAL_RANK and CUDA_VISIBLE_DEVICES), ranks given "
             "different world sizes or unique ids (two jobs on one MASTER_ADDR:MASTER_PORT?), "
             "or collectives called in a different order or with different sizes on some rank";
    case kNcclRemoteError:
      return "ncclRemoteError: a peer exited or the network between ranks failed; the first "
             "error is usually in another rank's output (NCCL_IB_DISABLE=1 falls back to TCP "
             "sockets, to tell a bad InfiniBand/RoCE link)";
    case kNcclInProgress:
      return "ncclInProgress: the operation is still running (NCCL's non-blocking mode, which "
             "loom does not use: a bug in loom)";
    default:
      return str("NCCL result ", result,
                 ": a code this build of loom does not know (an NCCL "
                 "newer than loom's table)");
  }
}

std::vector<std::pair<std::string, std::string>> nccl_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (std::strncmp(*e, "NCCL_", 5) == 0 && eq)
      out.emplace_back(std::string(*e, size_t(eq - *e)), eq + 1);
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<std::string>& nccl_key_variables() {
  static const std::vector<std::string> names = {
      "NCCL_DEBUG",         "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE",
      "NCCL_IB_HCA",        "NCCL_P2P_DISABLE",  "NCCL_P2P_LEVEL",     "NCCL_SHM_DISABLE",
      "NCCL_NET_GDR_LEVEL", "NCCL_NVLS_ENABLE",  "NCCL_ALGO",          "NCCL_PROTO"};
  return names;
}

namespace {
std::string where(const NcclFailure& f) {
  std::string v = f.nccl_version > 0 ? cuda::nccl_version_string(f.nccl_version) : "unknown";
  return str("rank ", f.rank, " of ", f.world, " (cuda:", f.device, ", NCCL ", v, ")");
}

std::string next_steps() {
  const char* debug = std::getenv("NCCL_DEBUG");
  std::string d = debug && *debug
                      ? str("NCCL_DEBUG=", debug, " is set: NCCL's own lines on stderr say more")
                      : "rerun with NCCL_DEBUG=WARN (NCCL then prints why on stderr; "
                        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET also shows the transports "
                        "it chose)";
  return str("To look further: ", d,
             "; run envinfo on every node (NCCL and driver versions must match across ranks); "
             "isolate a transport by rerunning with NCCL_P2P_DISABLE=1 (GPU peer-to-peer), "
             "NCCL_SHM_DISABLE=1 (shared memory) or NCCL_IB_DISABLE=1 (InfiniBand/RoCE).");
}

std::string settings() {
  std::string s;
  for (const auto& [k, v] : nccl_environment()) s += str(s.empty() ? "" : ", ", k, "=", v);
  return "NCCL variables set here: " + (s.empty() ? std::string("none") : s) + ".";
}
}  // namespace

std::string explain_nccl_error(const NcclFailure& f) {
  std::string last = f.last_error.empty() ? "" : str(" [NCCL: ", f.last_error, "]");
  return str("nccl: ", f.call, " failed on ", where(f), ": ", f.error_string, last, ".\n",
             nccl_result_advice(f.result), ".\n", next_steps(), "\n", settings());
}

}  // namespace loom::distributed
