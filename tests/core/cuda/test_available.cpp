// core/cuda/available.h in every build: what envinfo says when no GPU is usable, told apart by
// the CUDA runtime's answers (no driver, a driver too old, a driver that sees no device).
#include <gtest/gtest.h>

#include "core/cuda/available.h"

using namespace loom::cuda;

TEST(CudaAvailable, NoDeviceExplanationsTellTheCausesApart) {
  // No libcuda: the runtime says "insufficient driver" and the driver version is 0.
  std::string none = explain_no_device(kCudaErrorInsufficientDriver, 0, 13000);
  EXPECT_NE(none.find("no NVIDIA driver is installed"), std::string::npos) << none;
  // A driver for CUDA 12.2 under a CUDA 13.0 runtime.
  std::string old = explain_no_device(kCudaErrorInsufficientDriver, 12020, 13000);
  EXPECT_NE(old.find("too old"), std::string::npos) << old;
  EXPECT_NE(old.find("12.2"), std::string::npos) << old;
  EXPECT_NE(old.find("13.0"), std::string::npos) << old;
  // A driver but no GPU.
  std::string nodev = explain_no_device(kCudaErrorNoDevice, 13000, 13000);
  EXPECT_NE(nodev.find("sees no GPU"), std::string::npos) << nodev;
  EXPECT_NE(explain_no_device(0, 13000, 13000).find("sees no GPU"), std::string::npos);
  EXPECT_NE(explain_no_device(46, 13000, 13000).find("error 46"), std::string::npos);
}

TEST(CudaAvailable, CompiledInMatchesTheBuild) {
#ifdef LOOM_WITH_CUDA
  EXPECT_TRUE(compiled_with_cuda());
#else
  EXPECT_FALSE(compiled_with_cuda());
  EXPECT_EQ(device_count(), 0);
  EXPECT_FALSE(is_available());
#endif
}
