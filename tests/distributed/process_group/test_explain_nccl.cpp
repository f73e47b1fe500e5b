// distributed/process_group/explain_nccl.h without a GPU: the message names the call, NCCL's
// strings, the rank, world, device and version, gives advice by result code, the next steps and the
// NCCL_* variables set (Note [Explaining NCCL errors]). NCCL_* variables are set by hand and
// restored after.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "distributed/process_group/explain_nccl.h"

using namespace loom::distributed;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != s.npos; }

// Each test starts with no NCCL_* variable set and leaves the process's values as it found them.
class ExplainNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [k, v] : nccl_environment()) {
      saved_[k] = v;
      unsetenv(k.c_str());
    }
  }
  void TearDown() override {
    unsetenv("LOOM_TEST_NOT_NCCL_X");
    for (const auto& [k, v] : nccl_environment()) unsetenv(k.c_str());
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

NcclFailure system_error() {
  return {.call = "ncclCommInitRank(&comm_->comm, size, id, rank)",
          .result = kNcclSystemError,
          .error_string = "unhandled system error (run with NCCL_DEBUG=INFO for details)",
          .last_error = "socketStartConnect: Connect to 10.0.0.1<43215> failed",
          .rank = 3,
          .world = 8,
          .device = 1,
          .nccl_version = 22803};
}

TEST_F(ExplainNccl, NamesTheCallTheStringsAndWhere) {
  std::string m = explain_nccl_error(system_error());
  EXPECT_TRUE(has(m,
                  "nccl: ncclCommInitRank(&comm_->comm, size, id, rank) failed on rank 3 of 8 "
                  "(cuda:1, NCCL 2.28.3): unhandled system error"))
      << m;
  EXPECT_TRUE(has(m, "[NCCL: socketStartConnect: Connect to 10.0.0.1<43215> failed]")) << m;
  EXPECT_TRUE(has(m, "ncclSystemError: a system call failed")) << m;
  EXPECT_TRUE(has(m, "NCCL_SOCKET_IFNAME")) << m;
}

TEST_F(ExplainNccl, SaysWhatToLookAtNext) {
  std::string m = explain_nccl_error(system_error());
  EXPECT_TRUE(has(m, "rerun with NCCL_DEBUG=WARN")) << m;
  EXPECT_TRUE(has(m, "NCCL and driver versions must match across ranks")) << m;
  for (const char* v : {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_IB_DISABLE=1"})
    EXPECT_TRUE(has(m, v)) << v << " in " << m;
  EXPECT_TRUE(has(m, "NCCL variables set here: none.")) << m;
}

TEST_F(ExplainNccl, ListsTheNcclVariablesSet) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("LOOM_TEST_NOT_NCCL_X", "1", 1);  // not an NCCL variable: not listed
  std::string m = explain_nccl_error(system_error());
  EXPECT_TRUE(has(m, "NCCL variables set here: NCCL_DEBUG=INFO, NCCL_P2P_DISABLE=1.")) << m;
  EXPECT_TRUE(has(m, "NCCL_DEBUG=INFO is set: NCCL's own lines on stderr say more")) << m;
  EXPECT_FALSE(has(m, "rerun with NCCL_DEBUG=WARN")) << m;
  auto env = nccl_environment();
  ASSERT_EQ(env.size(), 2u);
  EXPECT_EQ(env[0].first, "NCCL_DEBUG");
  EXPECT_EQ(env[1].second, "1");
}

TEST_F(ExplainNccl, NoLastErrorNoVersion) {
  NcclFailure f = system_error();
  f.last_error.clear();
  f.nccl_version = 0;
  std::string m = explain_nccl_error(f);
  EXPECT_FALSE(has(m, "[NCCL:")) << m;
  EXPECT_TRUE(has(m, "(cuda:1, NCCL unknown)")) << m;
}

TEST_F(ExplainNccl, AdviceByResultCode) {
  EXPECT_TRUE(has(nccl_result_advice(kNcclUnhandledCudaError), "CUDA_LAUNCH_BLOCKING=1"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclSystemError), "/dev/shm"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclInternalError), "different NCCL versions"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclInvalidArgument), "ncclInvalidArgument"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclInvalidUsage), "two ranks on one GPU"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclRemoteError), "a peer exited"));
  EXPECT_TRUE(has(nccl_result_advice(kNcclInProgress), "non-blocking"));
  EXPECT_TRUE(has(nccl_result_advice(42), "NCCL result 42"));
  // Each code has its own advice.
  for (int a = 1; a <= 7; ++a)
    for (int b = a + 1; b <= 7; ++b) EXPECT_NE(nccl_result_advice(a), nccl_result_advice(b));
}

TEST_F(ExplainNccl, KeyVariablesIncludeTheTransportSwitches) {
  const auto& k = nccl_key_variables();
  for (const char* v : {"NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE",
                        "NCCL_SOCKET_IFNAME", "NCCL_NVLS_ENABLE"})
    EXPECT_NE(std::find(k.begin(), k.end(), v), k.end()) << v;
}
}  // namespace
