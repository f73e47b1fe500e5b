// CPU SwiGLU backward (Backend::swiglu_backward, the fused section of kernels/backend_methods.inc):
// one parallel pass over grad, gate and up (contiguous copies when strided) writing both
// gradients with the SwigluBackward functor of kernels/functors.h, shared with CUDA.
// Leaves out: the forward (the binary op Swiglu, through the elementwise loops) and broadcasting
// (the op passes tensors of one shape).
#include "core/dispatch.h"
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/raw_ops.h"

namespace loom::cpu {

// grad, gate, up: one shape -> (d gate, d up) contiguous
TensorPair CpuBackend::swiglu_backward(const Tensor& grad_in, const Tensor& gate_in,
                                       const Tensor& up_in) {
  check_swiglu_backward_args(grad_in, gate_in, up_in);
  const Tensor grad = raw::contiguous(grad_in), gate = raw::contiguous(gate_in),
               up = raw::contiguous(up_in);
  Tensor d_gate = empty(gate.shape(), {.dtype = gate.dtype()});
  Tensor d_up = empty(gate.shape(), {.dtype = gate.dtype()});
  LOOM_DISPATCH_FLOATING(gate.dtype(), "swiglu_backward", [&] {
    using A = acc_t<scalar_t>;
    const scalar_t *g = grad.data<scalar_t>(), *a = gate.data<scalar_t>(), *b = up.data<scalar_t>();
    scalar_t *da = d_gate.data<scalar_t>(), *db = d_up.data<scalar_t>();
    parallel_for(0, gate.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        A dga, dub;
        SwigluBackward{}(A(g[i]), A(a[i]), A(b[i]), dga, dub);
        da[i] = scalar_t(dga);
        db[i] = scalar_t(dub);
      }
    });
  });
  return {d_gate, d_up};
}

}  // namespace loom::cpu
