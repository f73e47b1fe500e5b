// Finding the backend of a device, and the composite linear layer both backends can fall back on.
#include "kernels/backend.h"

#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"
#ifdef LOOM_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace loom {

Backend& backend_for(Device d) {
  if (d.is_cpu()) return cpu::cpu_backend();
#ifdef LOOM_WITH_CUDA
  return cuda::cuda_backend();
#else
  LOOM_FAIL("backend_for(", d,
            "): this build of loom has no CUDA support (configure with -DLOOM_CUDA=ON)");
#endif
}

Tensor linear_composite(Backend& be, const Tensor& x, const Tensor& w, const Tensor& bias,
                        LinearActivation act) {
  Tensor y = be.mm(x, raw::transpose(w, 0, 1));  // (M, K) @ (K, N), w^T as a view
  if (bias.defined()) be.binary_(BinaryOp::Add, y, bias);
  if (act == LinearActivation::Relu) y = be.unary(UnaryOp::Relu, y);
  return y;
}

void check_batch_norm_pool2_input(const char* op, const Tensor& x) {
  LOOM_CHECK(x.dim() == 4, op, ": expected an input (N, C, H, W), got ", describe(x));
  LOOM_CHECK(x.size(2) % 2 == 0 && x.size(3) % 2 == 0 && x.size(2) > 0 && x.size(3) > 0, op,
             ": input ", x.shape(), " needs an even, non-zero H and W");
  LOOM_CHECK(x.size(0) * x.size(2) * x.size(3) > 1, op,
             ": expected more than 1 value per channel when using batch statistics, got input ",
             x.shape());
}

bool has_backend(DeviceType t) {
#ifdef LOOM_WITH_CUDA
  return t == DeviceType::CPU || t == DeviceType::CUDA;
#else
  return t == DeviceType::CPU;
#endif
}

}  // namespace loom
