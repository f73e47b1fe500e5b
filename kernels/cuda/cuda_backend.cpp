// The one CUDA backend object (kernels/cuda/cuda_backend.h). Its methods are in the family files.
#include "kernels/cuda/cuda_backend.h"

namespace loom::cuda {

// Never destroyed: kernels may still be queued when static destructors run at exit.
CudaBackend& cuda_backend() {
  static CudaBackend* b = new CudaBackend;
  return *b;
}

}  // namespace loom::cuda
