// The per-element math of the fused optimizer steps (Backend::adam_step / sgd_step), written
// once for the CPU loop (kernels/cpu/cpu_optim.cpp) and the CUDA kernel (kernels/cuda/
// cuda_optim.cu), plus the host side both backends run first: the argument checks
// (Note [The path of a fused step]).
// Leaves out: the dtype switch and the loops over tensors and elements (each backend has its own).
#pragma once

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/macros.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/functors.h"

namespace loom {

// a * b. On CUDA rounded once and never contracted into a fused multiply-add with what follows,
// so the clip's coefficient applied inside the update (AdamMath::grad_scale) gives the very bits
// of a separate scaling pass (nn::clip_grad_norm_) followed by the update. The CPU loop keeps the
// plain product (the compiler may contract it; a barrier would stop the loop's vectorization).
template <typename T>
LOOM_HOST_DEVICE inline T mul_rn(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (std::is_same_v<T, float>)
    return __fmul_rn(a, b);
  else
    return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Note [Adam's update, as PyTorch computes it]
// With g the gradient (plus wd * p for Adam; for AdamW p *= 1 - lr * wd first):
//   m = m + (1 - beta1) * (g - m)          (torch's lerp_ for a weight below 0.5)
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v)                  (amsgrad; v_max replaces v below)
//   p = p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_k = 1 - beta_k^step
// The scalars are computed once per launch in double and passed in the element type: on the host
// from AdamStepParams, or, for steps whose lr and step live on the device (Note [Step scalars on
// the device] in kernels/params.h), by at() at the start of the kernel.
template <typename T>
struct AdamMath {
  T one_minus_beta1, beta2, one_minus_beta2, weight_decay, decay_keep, step_size, bc2_sqrt, eps;
  T grad_scale;  // every gradient is multiplied by it first (AdamStepParams::grad_scale; else 1)
  bool decoupled, amsgrad;
  double beta1_d, beta2_d, weight_decay_d;  // what at() needs

  static AdamMath make(const AdamStepParams& p) {
    AdamMath m{T(1.0 - p.beta1),
               T(p.beta2),
               T(1.0 - p.beta2),
               T(p.weight_decay),
               T(1),
               T(1),
               T(1),
               T(p.eps),
               T(1),
               p.decoupled_weight_decay,
               p.amsgrad,
               p.beta1,
               p.beta2,
               p.weight_decay};
    return m.at(p.lr, double(p.step));
  }

  // The same math with learning rate lr for update number `step` (1 for the first).
  LOOM_HOST_DEVICE AdamMath at(double lr, double step) const {
    AdamMath m = *this;
    double bc1 = 1.0 - ::pow(beta1_d, step);
    double bc2 = 1.0 - ::pow(beta2_d, step);
    m.decay_keep = T(1.0 - lr * weight_decay_d);
    m.step_size = T(lr / bc1);
    m.bc2_sqrt = T(::sqrt(bc2));
    return m;
  }

  // One element: p, m, v (and v_max when amsgrad) are updated in place.
  LOOM_HOST_DEVICE void operator()(T& p, T g, T& m, T& v, T* vmax) const {
    if (amsgrad)
      update<true>(p, g, m, v, vmax);
    else
      update<false>(p, g, m, v, vmax);
  }

  // The same with amsgrad known at compile time: a loop over update<false> has no store through
  // vmax, so the CPU compiler can vectorize it (kernels/cpu/cpu_optim.cpp).
  template <bool kAmsgrad>
  LOOM_HOST_DEVICE void update(T& p, T g, T& m, T& v, T* vmax) const {
    // Branches touch locals only (each of p, m, v is stored once, unconditionally), so a CPU
    // compiler can turn them into selects and vectorize the loop.
    T pv = p;
    g = mul_rn(g, grad_scale);  // rounded as a separate pass's product would be
    if (weight_decay != T(0)) {
      if (decoupled)
        pv = pv * decay_keep;
      else
        g = g + weight_decay * pv;
    }
    const T mv = m + one_minus_beta1 * (g - m);
    const T vv = beta2 * v + one_minus_beta2 * g * g;
    m = mv;
    v = vv;
    T vhat = vv;
    if constexpr (kAmsgrad) {
      *vmax = *vmax > vv ? *vmax : vv;
      vhat = *vmax;
    }
    T denom = math::sqrt(vhat) / bc2_sqrt + eps;
    p = pv - step_size * (mv / denom);
  }
};

// SGD (PyTorch's): d_p = g + wd * p; with momentum, buf = d_p on the first step, else
// buf = momentum * buf + (1 - dampening) * d_p, then d_p = nesterov ? d_p + momentum * buf : buf;
// p = p - lr * d_p.
template <typename T>
struct SgdMath {
  T lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step;

  static SgdMath make(const SgdStepParams& p) {
    return SgdMath{T(p.lr),           T(p.momentum), T(1.0 - p.dampening),
                   T(p.weight_decay), p.nesterov,    p.first_step};
  }

  // The same math with learning rate lr after `step` earlier updates (device-side scalars).
  LOOM_HOST_DEVICE SgdMath at(double lr, double step) const {
    SgdMath m = *this;
    m.lr = T(lr);
    m.first_step = step == 0.0;
    return m;
  }

  // buf is null when momentum == 0.
  LOOM_HOST_DEVICE void operator()(T& p, T g, T* buf) const {
    T d = weight_decay != T(0) ? g + weight_decay * p : g;
    if (buf) {
      T b = first_step ? d : momentum * *buf + one_minus_dampening * d;
      *buf = b;
      d = nesterov ? d + momentum * b : b;
    }
    p = p - lr * d;
  }
};

// Checks the lists given to adam_step / sgd_step (see Note [Fused optimizer steps] in
// kernels/backend_methods.inc); `states`
// are the per-parameter state lists that must be present.
inline void check_fused_step_args(const char* op, const std::vector<Tensor>& params,
                                  const std::vector<Tensor>& grads,
                                  const std::vector<const std::vector<Tensor>*>& states) {
  LOOM_CHECK(grads.size() == params.size(), op, ": ", params.size(), " parameters but ",
             grads.size(), " gradients");
  for (const auto* s : states)
    LOOM_CHECK(s->size() == params.size(), op, ": ", params.size(),
               " parameters but a state list of ", s->size());
  if (params.empty()) return;
  DType dt = params[0].dtype();
  Device dev = params[0].device();
  LOOM_CHECK(dt == DType::F32 || dt == DType::F64, op,
             ": parameters must be float32 or float64, got ", describe(params[0]));
  // t: entry i of one list; p: parameter i.
  auto check = [&](const Tensor& t, const Tensor& p, size_t i, const char* what) {
    LOOM_CHECK(t.defined() && t.dtype() == dt && t.device() == dev && t.is_contiguous() &&
                   t.shape() == p.shape(),
               op, ": ", what, " ", i, " (", t.defined() ? describe(t) : std::string("undefined"),
               ") must be contiguous, ", dtype_name(dt), " on ", dev,
               " and of the parameter's shape ", p.shape(), " (parameter \"", p.name(), "\")");
  };
  for (size_t i = 0; i < params.size(); ++i) {
    LOOM_CHECK(params[i].defined(), op, ": parameter ", i, " is undefined");
    check(params[i], params[i], i, "parameter");
    check(grads[i], params[i], i, "gradient");
    for (const auto* s : states) check((*s)[i], params[i], i, "state tensor");
  }
}

// Checks the device-side scalars (Note [Step scalars on the device]) against the parameters.
inline void check_step_scalars(const char* op, const DeviceStepScalars& d, const Tensor& param) {
  if (!d.defined()) return;
  auto check = [&](const Tensor& t, DType dt, const char* what) {
    LOOM_CHECK(t.defined() && t.dtype() == dt && t.numel() == 1 && t.is_contiguous() &&
                   t.device() == param.device(),
               op, ": the device-side ", what, " must be one ", dtype_name(dt), " value on ",
               param.device(), ", got ", t.defined() ? describe(t) : std::string("undefined"));
  };
  check(d.lr, DType::F64, "learning rate");
  check(d.step, DType::F64, "step count");
  if (d.skip_if.defined()) check(d.skip_if, DType::F32, "skip flag");
}

// Note [The path of a fused step]
// One way down: CpuBackend::adam_step (kernels/cpu/cpu_optim.cpp) or CudaBackend::adam_step
// (kernels/cuda/optim/cuda_optim.cu) calls fused_adam_step below with its own typed body (a loop
// or a kernel launch, which runs AdamMath on each element); fused_adam_step runs the host side
// both share (check_adam_step: every list and the device-side scalars) and the switch on the
// parameters' dtype. sgd_step goes the same way through fused_sgd_step.

// Parameters may be float32 or float64 (check_fused_step_args); the backends' dtype switch
// instantiates its loop for these two only.
template <typename T>
constexpr bool is_fused_step_type = std::is_same_v<T, float> || std::is_same_v<T, double>;

// The checks of Backend::adam_step. Returns false when there is nothing to update (no parameters).
inline bool check_adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                            const std::vector<Tensor>& exp_avgs,
                            const std::vector<Tensor>& exp_avg_sqs,
                            const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& hp) {
  std::vector<const std::vector<Tensor>*> states{&exp_avgs, &exp_avg_sqs};
  if (hp.amsgrad) states.push_back(&max_exp_avg_sqs);
  check_fused_step_args("adam_step", params, grads, states);
  if (params.empty()) return false;
  check_step_scalars("adam_step", hp.on_device, params[0]);
  const Tensor& s = hp.grad_scale;
  LOOM_CHECK(!s.defined() || (s.numel() == 1 && s.dtype() == params[0].dtype() &&
                              s.device() == params[0].device()),
             "adam_step: the gradients' scale must be one ", dtype_name(params[0].dtype()),
             " value on ", params[0].device(), ", got ", describe(s));
  return true;
}

// The checks of Backend::sgd_step. Returns false when there is nothing to update (no parameters).
inline bool check_sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& momentum_bufs, const SgdStepParams& hp) {
  std::vector<const std::vector<Tensor>*> states;
  if (hp.momentum != 0.0) states.push_back(&momentum_bufs);
  check_fused_step_args("sgd_step", params, grads, states);
  if (params.empty()) return false;
  check_step_scalars("sgd_step", hp.on_device, params[0]);
  return true;
}

// A backend's adam_step: the checks, then typed(T{}) for the parameters' dtype T (float or
// double), where typed runs the backend's loop or kernel for T.
template <typename Typed>
void fused_adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                     const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& hp,
                     Typed&& typed) {
  if (!check_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp)) return;
  LOOM_DISPATCH_FLOATING(params[0].dtype(), "adam_step", [&] {
    if constexpr (is_fused_step_type<scalar_t>) typed(scalar_t{});
  });
}

// A backend's sgd_step, the same way.
template <typename Typed>
void fused_sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& momentum_bufs, const SgdStepParams& hp,
                    Typed&& typed) {
  if (!check_sgd_step(params, grads, momentum_bufs, hp)) return;
  LOOM_DISPATCH_FLOATING(params[0].dtype(), "sgd_step", [&] {
    if constexpr (is_fused_step_type<scalar_t>) typed(scalar_t{});
  });
}

}  // namespace loom
