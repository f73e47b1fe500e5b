// The float32 math mode of the CUDA backend's library calls (cuBLASLt matmuls, cuDNN convolutions).
// Strict float32 is the default: TF32 tensor-core math is used only after set_allow_tf32(true).
// Leaves out: reduced-precision dtypes (f16/bf16 always use tensor cores with float accumulation).
#pragma once

namespace loom::cuda {

// Note [Strict fp32]
// With allow_tf32() false, float32 matrix products use CUBLAS_COMPUTE_32F (never
// CUBLAS_COMPUTE_32F_FAST_TF32) and float32 convolutions use CUDNN_FMA_MATH, the only cuDNN math
// type that excludes TF32 on Ampere and newer (CUDNN_DEFAULT_MATH permits TF32 there). With it
// true, they use CUBLAS_COMPUTE_32F_FAST_TF32 and CUDNN_DEFAULT_MATH. The setting is global (all
// devices, all threads) and read at each call; the plan caches key on it.
void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace loom::cuda
