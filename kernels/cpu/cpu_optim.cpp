// Fused optimizer steps on the CPU: one parallel loop per tensor running the per-element math
// of kernels/optim_math.h. Also the reference the CUDA multi-tensor kernel is tested against.
// Leaves out: vectorisation beyond what the compiler does with the plain loop; f16/bf16
// parameters (loom keeps float32 master weights).
#include "core/parallel.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/optim_math.h"

namespace loom::cpu {

namespace {

// Note [Step scalars on the device] (kernels/params.h), read from CPU memory: whether this update
// runs, and the learning rate and step count it uses. advance() counts the update afterwards.
struct HostView {
  const double* lr = nullptr;
  double* step = nullptr;
  bool skip = false;
  explicit HostView(const DeviceStepScalars& d) {
    if (!d.defined()) return;
    lr = d.lr.data<double>();
    step = d.step.data<double>();
    skip = d.skip_if.defined() && *d.skip_if.data<float>() != 0.0f;
  }
  void advance() const {
    if (step && !skip) *step += 1.0;
  }
};

template <typename T>
void adam_loop(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& hp) {
  const HostView dev(hp.on_device);
  if (dev.skip) return;
  auto math = AdamMath<T>::make(hp);
  if (dev.lr) math = math.at(*dev.lr, *dev.step + 1.0);
  if (hp.grad_scale.defined()) math.grad_scale = *hp.grad_scale.data<T>();
  for (size_t t = 0; t < params.size(); ++t) {
    T* p = params[t].data<T>();
    const T* g = grads[t].data<T>();
    T* m = exp_avgs[t].data<T>();
    T* v = exp_avg_sqs[t].data<T>();
    T* vmax = hp.amsgrad ? max_exp_avg_sqs[t].data<T>() : nullptr;
    parallel_for(0, params[t].numel(), kGrainSize / 8, [&](int64_t b, int64_t e) {
      if (vmax) {
        for (int64_t i = b; i < e; ++i)
          math.template update<true>(p[i], g[i], m[i], v[i], vmax + i);
        return;
      }
      // Without amsgrad the loop vectorizes: the four tensors are distinct (restrict), and the
      // per-element math has no store but to them.
      T* __restrict pb = p + b;
      const T* __restrict gb = g + b;
      T* __restrict mb = m + b;
      T* __restrict vb = v + b;
      const AdamMath<T> mt = math;
#pragma omp simd
      for (int64_t i = 0; i < e - b; ++i)
        mt.template update<false>(pb[i], gb[i], mb[i], vb[i], nullptr);
    });
  }
  dev.advance();
}

template <typename T>
void sgd_loop(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_bufs, const SgdStepParams& hp) {
  const HostView dev(hp.on_device);
  if (dev.skip) return;
  auto math = SgdMath<T>::make(hp);
  if (dev.lr) math = math.at(*dev.lr, *dev.step);
  for (size_t t = 0; t < params.size(); ++t) {
    T* p = params[t].data<T>();
    const T* g = grads[t].data<T>();
    T* buf = hp.momentum != 0.0 ? momentum_bufs[t].data<T>() : nullptr;
    parallel_for(0, params[t].numel(), kGrainSize / 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) math(p[i], g[i], buf ? buf + i : nullptr);
    });
  }
  dev.advance();
}

}  // namespace

// Note [The path of a fused step] (kernels/optim_math.h): fused_adam_step and fused_sgd_step run
// the shared checks and the dtype switch, then adam_loop / sgd_loop above.
void CpuBackend::adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                           const std::vector<Tensor>& exp_avgs,
                           const std::vector<Tensor>& exp_avg_sqs,
                           const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& hp) {
  fused_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp, [&](auto t) {
    adam_loop<decltype(t)>(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp);
  });
}

void CpuBackend::sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                          const std::vector<Tensor>& momentum_bufs, const SgdStepParams& hp) {
  fused_sgd_step(params, grads, momentum_bufs, hp,
                 [&](auto t) { sgd_loop<decltype(t)>(params, grads, momentum_bufs, hp); });
}

}  // namespace loom::cpu
