// Finding the backend of a device, the composite linear layer both backends can fall back on, and
// the argument checks several backend methods share.
#include "kernels/backend.h"

#include <algorithm>
#include <sstream>
#include <utility>
#include <vector>

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

LinearOut linear_composite(Backend& be, const Tensor& x, const Tensor& w, const Tensor& bias,
                           LinearActivation act) {
  Tensor y = be.mm(x, raw::transpose(w, 0, 1));  // (M, K) @ (K, N), w^T as a view
  if (bias.defined()) be.binary_(BinaryOp::Add, y, bias);
  if (act == LinearActivation::Relu) return {be.unary(UnaryOp::Relu, y), Tensor()};
  if (act == LinearActivation::GeluTanh) return {be.unary(UnaryOp::GeluTanh, y), y};
  return {y, Tensor()};
}

GeluBackwardOut mm_gelu_tanh_backward_composite(Backend& be, const Tensor& g, const Tensor& w,
                                                const Tensor& pre, bool bias) {
  Tensor grad = be.binary(BinaryOp::GeluTanhBackward, be.mm(g, w), pre);  // (M, N) @ (N, K)
  return {grad, bias ? be.reduce(ReduceOp::Sum, grad, {0}, false) : Tensor()};
}

void check_mm_out_dtype(const char* op, const Tensor& a, std::optional<DType> out_dtype) {
  LOOM_CHECK(
      !out_dtype || *out_dtype == a.dtype() ||
          (*out_dtype == DType::F32 && (a.dtype() == DType::BF16 || a.dtype() == DType::F16)),
      op, ": out_dtype ", out_dtype ? dtype_name(*out_dtype) : "", " is not supported for ",
      describe(a), " (expected its own dtype, or float32 for float16/bfloat16)");
}

void check_mm_into(const char* op, const Tensor& out, const Tensor& a, const Tensor& b) {
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2 && a.size(1) == b.size(0) &&
                 out.size(0) == a.size(0) && out.size(1) == b.size(1),
             op, ": out ", out.shape(), " cannot hold ", a.shape(), " @ ", b.shape());
  LOOM_CHECK(a.dtype() == b.dtype() && a.device() == b.device() && out.device() == a.device(), op,
             ": a ", describe(a), ", b ", describe(b), " and out ", describe(out),
             " need one dtype for a and b and one device");
  LOOM_CHECK(out.is_contiguous(), op, ": out ", describe(out), " must be contiguous");
  check_mm_out_dtype(op, a, out.dtype());
}

void check_layer_norm_backward_extras(const char* op, const LayerNormBackwardExtras& e,
                                      const Tensor& x) {
  const Tensor& a = e.grad_add;
  LOOM_CHECK(!a.defined() || (a.shape() == x.shape() && a.is_contiguous() &&
                              a.dtype() == x.dtype() && a.device() == x.device()),
             op, ": the gradient to add ", a.defined() ? describe(a) : "",
             " must be contiguous and like x ", describe(x));
  LOOM_CHECK(
      !e.grad_input_low || *e.grad_input_low == DType::BF16 || *e.grad_input_low == DType::F16, op,
      ": grad_input_low must be float16 or bfloat16, got ",
      e.grad_input_low ? dtype_name(*e.grad_input_low) : "");
}

void check_batch_norm_residual(const char* op, const Tensor& x, const Tensor& residual) {
  if (!residual.defined()) return;
  LOOM_CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
                 residual.device() == x.device(),
             op, ": residual ", describe(residual),
             " must have the shape, dtype and device of input ", describe(x));
}

void check_batch_norm_pool2_input(const char* op, const Tensor& x) {
  LOOM_CHECK(x.dim() == 4, op, ": expected an input (N, C, H, W), got ", describe(x));
  LOOM_CHECK(x.size(2) % 2 == 0 && x.size(3) % 2 == 0 && x.size(2) > 0 && x.size(3) > 0, op,
             ": input ", x.shape(), " needs an even, non-zero H and W");
  LOOM_CHECK(x.size(0) * x.size(2) * x.size(3) > 1, op,
             ": expected more than 1 value per channel when using batch statistics, got input ",
             x.shape());
}

void check_ce_into(const Tensor& into, const Tensor& logits) {
  LOOM_CHECK(
      !into.defined() || (into.shape() == logits.shape() && into.is_contiguous() &&
                          into.dtype() == logits.dtype() && into.device() == logits.device()),
      "cross_entropy_backward: the gradient's destination ", into.defined() ? describe(into) : "",
      " must be contiguous and like the logits ", describe(logits));
}

DType check_norm_list(const char* op, const std::vector<Tensor>& tensors, Device dev,
                      bool allow_16bit) {
  const DType dt = tensors.empty() ? DType::F32 : tensors[0].dtype();
  auto ok = [&](DType d) {
    return d == DType::F32 || d == DType::F64 ||
           (allow_16bit && (d == DType::F16 || d == DType::BF16));
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    LOOM_CHECK(
        t.defined() && ok(t.dtype()) && t.dtype() == dt && t.device() == dev && t.is_contiguous(),
        op, ": tensor ", i, " (", t.defined() ? describe(t) : std::string("undefined"),
        ") must be contiguous, float32 or float64", allow_16bit ? " (or 16-bit)" : "",
        " like tensor 0 (", dtype_name(dt), "), on ", dev);
  }
  return dt;
}

void check_scale_factor(const Tensor& factor, DType dt, Device dev) {
  const DType want = dt == DType::F16 || dt == DType::BF16 ? DType::F32 : dt;
  LOOM_CHECK(
      factor.defined() && factor.numel() == 1 && factor.dtype() == want && factor.device() == dev,
      "scale_by_: factor ", factor.defined() ? describe(factor) : std::string("undefined"),
      " must be one ", dtype_name(want), " value on ", dev, " for ", dtype_name(dt), " tensors");
}

CrossEntropyOut cross_entropy_with_grad_composed(Backend& be, const Tensor& logits,
                                                 const Tensor& target, Reduction r,
                                                 double label_smoothing, int64_t ignore_index) {
  LOOM_CHECK(r != Reduction::None && logits.is_contiguous(), "cross_entropy_with_grad_: logits ",
             describe(logits), " must be contiguous and the reduction Mean or Sum");
  CrossEntropyOut out = be.cross_entropy(logits, target, r, label_smoothing, ignore_index);
  const Tensor one = empty({}, {.dtype = DType::F64, .device = logits.device()});
  be.fill_(one, 1.0);
  // The Sum's gradient with grad 1 and scale 1, written over the logits (each element read
  // before it is overwritten, by the same thread).
  be.cross_entropy_backward(one, logits, target, out.lse, one, Reduction::Sum, label_smoothing,
                            ignore_index, logits);
  return out;
}

void check_sdpa_into(const char* op, const SdpaGrads& into, const Tensor& q, const Tensor& k,
                     const Tensor& v) {
  if (!into.dq.defined() && !into.dk.defined() && !into.dv.defined()) return;
  const std::pair<const Tensor*, const Tensor*> pairs[] = {
      {&into.dq, &q}, {&into.dk, &k}, {&into.dv, &v}};
  for (const auto& [d, x] : pairs)
    LOOM_CHECK(d->defined() && d->shape() == x->shape() && d->dtype() == x->dtype() &&
                   d->device() == x->device() && d->stride(-1) == 1,
               op, ": the gradients to write into must match q ", describe(q), ", k ", describe(k),
               " and v ", describe(v), " with a contiguous last dim, got ",
               d->defined() ? describe(*d) : std::string("undefined"));
}

void check_sdpa_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
             ": expected q (B, H, Tq, D), k (B, Hkv, Tk, D) and v (B, Hkv, Tk, Dv), got q ",
             q.shape(), ", k ", k.shape(), ", v ", v.shape());
  LOOM_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && v.size(1) == k.size(1) &&
                 k.size(3) == q.size(3) && v.size(2) == k.size(2),
             op, ": q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(),
             " do not agree on B, D (q and k) or Hkv and Tk (k and v)");
  LOOM_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, op, ": q has ", q.size(1),
             " heads and k and v have ", k.size(1), ": the key/value heads must divide the query ",
             "heads (grouped-query attention); q ", q.shape(), ", k ", k.shape(), ", v ",
             v.shape());
  LOOM_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
             ": q, k and v must share one floating dtype, got ", dtype_name(q.dtype()), ", ",
             dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  LOOM_CHECK(k.device() == q.device() && v.device() == q.device(), op,
             ": q, k and v must be on one device, got ", describe(q), ", ", describe(k), " and ",
             describe(v));
}

void check_sdpa_key_lengths(const char* op, const Tensor& q, const Tensor& key_lengths) {
  if (!key_lengths.defined()) return;
  LOOM_CHECK((key_lengths.dtype() == DType::I32 || key_lengths.dtype() == DType::I64) &&
                 key_lengths.dim() == 1 && key_lengths.size(0) == q.size(0) &&
                 key_lengths.device() == q.device(),
             op, ": key_lengths must be (B) = (", q.size(0), ") int32 or int64 on q's device (q ",
             describe(q), "), got ", describe(key_lengths));
}

Tensor empty_attention_layout(int64_t B, int64_t H, int64_t T, int64_t D, Options opt) {
  return make_view(empty({B, T, H, D}, opt), {B, H, T, D}, {T * H * D, D, H * D, 1}, 0);
}

DType rms_norm_stat_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

DType check_rms_norm_args(const char* op, const Tensor& x, const Tensor& weight) {
  LOOM_CHECK(x.dim() == 2 && x.is_contiguous() && is_floating(x.dtype()), op, ": x ", describe(x),
             " should be (M, N) contiguous and floating");
  if (!weight.defined()) return x.dtype();
  const bool x16 = x.dtype() == DType::F16 || x.dtype() == DType::BF16;
  LOOM_CHECK(weight.dim() == 1 && weight.size(0) == x.size(1) && weight.is_contiguous() &&
                 weight.device() == x.device() &&
                 (weight.dtype() == x.dtype() || (x16 && weight.dtype() == DType::F32)),
             op, ": weight ", describe(weight), " should be ", Shape{x.size(1)},
             " contiguous on x's device, of x's dtype (or float32 for 16-bit x); x ", describe(x));
  return weight.dtype();
}

void check_rms_norm_backward_args(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                  const Tensor& rstd) {
  const DType y_dtype = check_rms_norm_args("rms_norm_backward", x, weight);
  LOOM_CHECK(dy.shape() == x.shape() && dy.is_contiguous() && dy.dtype() == y_dtype &&
                 dy.device() == x.device(),
             "rms_norm_backward: grad ", describe(dy), " should be contiguous like x ", describe(x),
             " in y's dtype ", dtype_name(y_dtype));
  LOOM_CHECK(rstd.dim() == 1 && rstd.size(0) == x.size(0) && rstd.is_contiguous() &&
                 rstd.dtype() == rms_norm_stat_dtype(x.dtype()) && rstd.device() == x.device(),
             "rms_norm_backward: rstd ", describe(rstd), " should be ", Shape{x.size(0)}, " ",
             dtype_name(rms_norm_stat_dtype(x.dtype())), " on x's device; x ", describe(x));
}

void check_rope_args(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
                     int64_t offset) {
  LOOM_CHECK(x.dim() == 4 && x.size(3) % 2 == 0 && is_floating(x.dtype()), "rope: x ", describe(x),
             " should be (B, H, T, D), floating, with D even");
  const int64_t half = x.size(3) / 2, T = x.size(2);
  const DType table = rms_norm_stat_dtype(x.dtype());  // float64 for float64, else float32
  for (const Tensor* t : {&cos, &sin})
    LOOM_CHECK(t->defined() && t->dim() == 2 && t->size(1) == half && t->is_contiguous() &&
                   t->dtype() == table && t->device() == x.device() && t->shape() == cos.shape(),
               "rope: the cos and sin tables ", describe(cos), " and ", describe(sin),
               " should be (P, D / 2 = ", half, ") contiguous ", dtype_name(table),
               " on x's device; x ", describe(x));
  if (!positions.defined()) {
    LOOM_CHECK(offset >= 0 && offset + T <= cos.size(0), "rope: positions ", offset, " .. ",
               offset + T - 1, " of x ", describe(x), " are outside the table of ", cos.size(0),
               " positions");
    return;
  }
  LOOM_CHECK(positions.dtype() == DType::I64 && positions.is_contiguous() &&
                 positions.shape() == Shape({x.size(0), T}) && positions.device() == x.device(),
             "rope: positions ", describe(positions), " should be (B, T) = ", Shape({x.size(0), T}),
             " contiguous int64 on x's device; x ", describe(x));
}

namespace {
// Whether t's elements fill numel() consecutive slots exactly once: its strides, sorted, are
// those of a contiguous tensor of the dims in that order (size-1 dims anywhere).
bool is_dense(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims of size > 1
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.push_back({t.stride(d), t.size(d)});
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}
}  // namespace

Tensor empty_rope_output(const Tensor& x) {
  const Options o{.dtype = x.dtype(), .device = x.device()};
  if (is_dense(x)) return make_view(empty({x.numel()}, o), x.shape(), x.strides(), 0);
  return empty_attention_layout(x.size(0), x.size(1), x.size(2), x.size(3), o);
}

void check_swiglu_backward_args(const Tensor& grad, const Tensor& gate, const Tensor& up) {
  LOOM_CHECK(gate.shape() == up.shape() && grad.shape() == gate.shape() &&
                 is_floating(gate.dtype()) && up.dtype() == gate.dtype() &&
                 grad.dtype() == gate.dtype() && up.device() == gate.device() &&
                 grad.device() == gate.device(),
             "swiglu_backward: grad ", describe(grad), ", gate ", describe(gate), " and up ",
             describe(up), " should have one shape, one floating dtype and one device");
}

#ifndef LOOM_WITH_CUDNN_SDPA
namespace {
constexpr const char* kSdpaInstallHint =
    "scripts/install-deps.sh puts them in third_party/cudnn_frontend/include, or configure with "
    "-DLOOM_CUDNN_FRONTEND_DIR=<the folder holding cudnn_frontend.h>; then reconfigure and rebuild";
}  // namespace
#endif

std::string sdpa_fused_unsupported(const Tensor& q, const Tensor& k, const Tensor& v) {
  std::ostringstream why;
  if (!q.device().is_cuda())
    why << "q is on " << q.device() << ", not on a CUDA device";
  else if (q.dtype() != DType::F16 && q.dtype() != DType::BF16)
    why << "dtype " << dtype_name(q.dtype())
        << " (cuDNN's flash attention takes float16 and bfloat16 only)";
  else if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    why << "q " << q.shape() << ", k " << k.shape() << ", v " << v.shape()
        << " are not all 4-d (B, H, T, D)";
  else if (v.size(3) != q.size(3))
    why << "v's head size " << v.size(3) << " differs from q's " << q.size(3)
        << " (the fused path takes Dv = D only)";
  else if (q.size(3) < 8 || q.size(3) > 128 || q.size(3) % 8 != 0)
    why << "head size D = " << q.size(3)
        << " (cuDNN's flash attention needs 8 <= D <= 128 and D % 8 == 0)";
  else if (q.size(2) == 1 && k.size(2) == 1)
    why << "one query and one key (cuDNN's SDPA graphs refuse Tq = Tk = 1: a one-token prompt)";
#ifndef LOOM_WITH_CUDNN_SDPA
  else
    why << "this loom was built without cuDNN's frontend headers (" << kSdpaInstallHint << ")";
#endif
  return why.str();
}

bool has_backend(DeviceType t) {
#ifdef LOOM_WITH_CUDA
  return t == DeviceType::CPU || t == DeviceType::CUDA;
#else
  return t == DeviceType::CPU;
#endif
}

}  // namespace loom
