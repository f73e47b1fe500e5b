// The CUDA backend's 2-d convolutions: forward, backward data (grad of the input) and backward
// filter (grad of the weight), with stride, padding, dilation and groups, through cuDNN. This file
// holds the entry points, the layouts they accept (Note [Convolution layouts]) and the choice of
// path (kernels/cuda/cudnn_conv.h describes both).
// Leaves out: fused bias/activation (the bias is a separate add in the op layer), and choosing
// channels-last on its own: a tensor is channels-last only when its producer made it so.
#include <atomic>

#include "core/cuda/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cudnn_conv.h"
#include "kernels/cuda/launch.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

const char* conv_dir_name(ConvDir d) {
  return d == ConvDir::Forward        ? "conv2d"
         : d == ConvDir::BackwardData ? "conv2d_backward_input"
                                      : "conv2d_backward_weight";
}

cudnnDataType_t dnn_dtype(DType t) {
  switch (t) {
    case DType::F32:
      return CUDNN_DATA_FLOAT;
    case DType::F64:
      return CUDNN_DATA_DOUBLE;
    case DType::F16:
      return CUDNN_DATA_HALF;
    case DType::BF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      LOOM_FAIL("conv2d on CUDA: dtype ", dtype_name(t),
                " is not supported (expected float32, float64, float16 or bfloat16)");
  }
}

const Tensor& conv_output(const ConvArgs& a) {
  return a.dir == ConvDir::Forward ? a.y : a.dir == ConvDir::BackwardData ? a.x : a.w;
}

namespace {
std::atomic<int> g_conv_path{int(ConvPath::Fastest)};
}  // namespace

void set_conv_path(ConvPath p) { g_conv_path.store(int(p)); }
ConvPath conv_path() { return ConvPath(g_conv_path.load(std::memory_order_relaxed)); }

namespace {

// Note [Convolution layouts]
// cuDNN reads two layouts of a 4-d tensor as they are: contiguous NCHW, and channels-last, the
// strides of an (N, H, W, C) tensor behind the (N, C, H, W) shape (for a filter: KRSC). The entry
// points keep either, copy anything else to NCHW, and write the forward's output and the input
// gradient in the layout of the tensor they come from (x, grad_y); weight gradients are always
// contiguous like the parameters. Only the graph API takes channels-last; the classic API gets
// NCHW copies and its output is copied back into the layout asked for.

bool channels_last(const Tensor& t) {
  if (t.dim() != 4 || t.is_contiguous()) return false;
  int64_t C = t.size(1), H = t.size(2), W = t.size(3);
  return t.stride(1) == 1 && t.stride(3) == C && t.stride(2) == W * C && t.stride(0) == H * W * C;
}

Tensor dnn_layout(const Tensor& t) { return channels_last(t) ? t : raw::contiguous(t); }

// An uninitialised (N, C, H, W) tensor in t's layout (channels-last or contiguous).
Tensor empty_like_layout(const Shape& s, const Tensor& t) {
  Options o{.dtype = t.dtype(), .device = t.device()};
  if (!channels_last(t)) return empty(s, o);
  return empty({s[0], s[2], s[3], s[1]}, o).permute({0, 3, 1, 2});
}

// The classic API on NCHW copies of a's tensors, its output copied into a's.
void run_classic(const ConvArgs& a) {
  if (a.x.is_contiguous() && a.w.is_contiguous() && a.y.is_contiguous()) return run_conv_legacy(a);
  const Tensor& out = conv_output(a);
  Tensor out_nchw = empty(out.shape(), {.dtype = out.dtype(), .device = out.device()});
  auto pick = [&](const Tensor& t) { return &t == &out ? out_nchw : raw::contiguous(t); };
  run_conv_legacy({a.dir, pick(a.x), pick(a.w), pick(a.y), a.p});
  cuda_backend().copy_(out, out_nchw);
}

// Runs one direction on the path conv_path() and use_naive_kernels() choose (cudnn_conv.h).
void run_conv(const ConvArgs& a) {
  ConvPath path = use_naive_kernels() ? ConvPath::ClassicApi : conv_path();
  if (path != ConvPath::ClassicApi && run_conv_graph(a, path == ConvPath::Fastest)) return;
  run_classic(a);
}

int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

}  // namespace

// x: (N, C, H, W), w: (K, C/groups, R, S) -> (N, K, P, Q), in x's layout
Tensor CudaBackend::conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  int64_t P = conv_out_size(x.size(2), w.size(2), p.stride[0], p.padding[0], p.dilation[0]);
  int64_t Q = conv_out_size(x.size(3), w.size(3), p.stride[1], p.padding[1], p.dilation[1]);
  LOOM_CHECK(P > 0 && Q > 0, "conv2d: input ", x.shape(), " is smaller than the dilated kernel ",
             w.shape(), " with padding [", p.padding[0], ", ", p.padding[1], "]");
  Tensor xl = dnn_layout(x);
  Tensor y = empty_like_layout({x.size(0), w.size(0), P, Q}, xl);
  if (y.numel() == 0) return y;
  if (x.size(1) == 0) {
    fill_(y, 0.0);
    return y;
  }
  run_conv({ConvDir::Forward, xl, dnn_layout(w), y, p});
  return y;
}

// grad_y: (N, K, P, Q), w: (K, C/groups, R, S) -> (N, C, H, W) = x_shape, in grad_y's layout
Tensor CudaBackend::conv2d_backward_input(const Tensor& grad_y, const Tensor& w,
                                          const Shape& x_shape, const Conv2dParams& p) {
  Tensor gy = dnn_layout(grad_y);
  Tensor dx = empty_like_layout(x_shape, gy);
  if (dx.numel() == 0) return dx;
  if (grad_y.numel() == 0) {
    fill_(dx, 0.0);
    return dx;
  }
  run_conv({ConvDir::BackwardData, dx, dnn_layout(w), gy, p});
  return dx;
}

// grad_y: (N, K, P, Q), x: (N, C, H, W) -> (K, C/groups, R, S) = w_shape, contiguous
Tensor CudaBackend::conv2d_backward_weight(const Tensor& grad_y, const Tensor& x,
                                           const Shape& w_shape, const Conv2dParams& p) {
  Tensor dw = empty(w_shape, {.dtype = grad_y.dtype(), .device = grad_y.device()});
  if (dw.numel() == 0) return dw;
  if (grad_y.numel() == 0) {
    fill_(dw, 0.0);
    return dw;
  }
  run_conv({ConvDir::BackwardFilter, dnn_layout(x), dw, dnn_layout(grad_y), p});
  return dw;
}

}  // namespace loom::cuda
