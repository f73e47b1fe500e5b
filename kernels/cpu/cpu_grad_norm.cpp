// The fused gradient norm on the CPU (Note [Fused gradient norm] in kernels/backend_methods.inc):
// the sum of squares of a list of tensors, in double, element after element in list order (the
// deterministic reference the CUDA kernels are tested against), and the in-place scale (also of
// float16/bfloat16 tensors by a float32 factor).
// Leaves out: threads (a norm is a small part of a CPU step).
#include "kernels/cpu/cpu_backend.h"

namespace loom::cpu {

namespace {

template <typename T>
double sum_squares_of(const Tensor& t) {
  const T* p = t.data<T>();
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += double(p[i]) * double(p[i]);
  return s;
}

// t *= f, computed in F (T's own type, or float for 16-bit T) and rounded once to T.
template <typename T, typename F>
void scale_one(const Tensor& t, F f) {
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = T(F(p[i]) * f);
}

}  // namespace

// tensors: contiguous, one dtype (f32/f64) -> 0-d of that dtype
Tensor CpuBackend::sum_of_squares(const std::vector<Tensor>& tensors) {
  const DType dt = check_norm_list("sum_of_squares", tensors, kCPU);
  double s = 0;
  for (const Tensor& t : tensors)
    s += dt == DType::F64 ? sum_squares_of<double>(t) : sum_squares_of<float>(t);
  Tensor out = empty({}, {.dtype = dt});
  if (dt == DType::F64)
    *out.data<double>() = s;
  else
    *out.data<float>() = float(s);
  return out;
}

// every tensor *= factor (0-d, the tensors' dtype; float32 for 16-bit tensors)
void CpuBackend::scale_by_(const std::vector<Tensor>& tensors, const Tensor& factor) {
  const DType dt = check_norm_list("scale_by_", tensors, kCPU, /*allow_16bit=*/true);
  check_scale_factor(factor, dt, kCPU);
  for (const Tensor& t : tensors) {
    if (dt == DType::F64)
      scale_one<double>(t, *factor.data<double>());
    else if (dt == DType::F32)
      scale_one<float>(t, *factor.data<float>());
    else if (dt == DType::BF16)
      scale_one<BFloat16>(t, *factor.data<float>());
    else
      scale_one<Half>(t, *factor.data<float>());
  }
}

}  // namespace loom::cpu
