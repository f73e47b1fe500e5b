// The CUDA backend's 2-d convolutions: forward, backward data (grad of the input) and backward
// filter (grad of the weight), with stride, padding, dilation and groups, through cuDNN. This file
// holds the entry points, the layouts they accept (Note [Convolution layouts]) and the choice of
// path (kernels/cuda/conv/cudnn_conv.h describes both).
// Leaves out: fused bias/activation (the bias is a separate add in the op layer), and choosing
// channels-last on its own: a tensor is channels-last only when its producer made it so.
#include <atomic>

#include "core/cuda/check.h"
#include "kernels/cuda/conv/cudnn_conv.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/library_dtypes.h"
#include "kernels/raw_ops.h"

namespace loom::cuda {

const char* conv_dir_name(ConvDir d) {
  return d == ConvDir::Forward        ? "conv2d"
         : d == ConvDir::BackwardData ? "conv2d_backward_input"
                                      : "conv2d_backward_weight";
}

cudnnDataType_t dnn_dtype(DType t) { return library_types(t, "conv2d on CUDA").cudnn; }

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
// cuDNN reads two layouts of a 4-d tensor as they are: contiguous NCHW, and channels-last (Note
// [Channels-last]: NHWC strides behind the (N, C, H, W) shape; KRSC for a filter). With a
// channels-last input (x forward, grad_y for the input gradient, either for the weight gradient)
// the whole call runs channels-last: the other tensors are copied into that layout if they are not
// (the filter: a small copy) and the output is written in it, except the weight gradient, which is
// computed KRSC and returned contiguous like the parameters. Anything else runs NCHW. Only the
// graph API takes channels-last; the classic API gets NCHW copies and its output is copied back
// into the layout asked for.

Tensor dnn_layout(const Tensor& t) { return raw::is_channels_last(t) ? t : raw::contiguous(t); }

// An uninitialised (N, C, H, W) tensor, channels-last or contiguous.
Tensor empty_in_layout(const Shape& s, const Tensor& like, bool channels_last) {
  Options o{.dtype = like.dtype(), .device = like.device()};
  return channels_last ? raw::empty_channels_last(s, o) : empty(s, o);
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
  const bool cl = raw::is_channels_last(x);
  Tensor y = empty_in_layout({x.size(0), w.size(0), P, Q}, x, cl);
  if (y.numel() == 0) return y;
  if (x.size(1) == 0) {
    fill_(y, 0.0);
    return y;
  }
  run_conv(
      {ConvDir::Forward, dnn_layout(x), cl ? raw::channels_last(w) : raw::contiguous(w), y, p});
  return y;
}

// grad_y: (N, K, P, Q), w: (K, C/groups, R, S) -> (N, C, H, W) = x_shape, in grad_y's layout
Tensor CudaBackend::conv2d_backward_input(const Tensor& grad_y, const Tensor& w,
                                          const Shape& x_shape, const Conv2dParams& p) {
  const bool cl = raw::is_channels_last(grad_y);
  Tensor dx = empty_in_layout(x_shape, grad_y, cl);
  if (dx.numel() == 0) return dx;
  if (grad_y.numel() == 0) {
    fill_(dx, 0.0);
    return dx;
  }
  run_conv({ConvDir::BackwardData, dx, cl ? raw::channels_last(w) : raw::contiguous(w),
            dnn_layout(grad_y), p});
  return dx;
}

// grad_y: (N, K, P, Q), x: (N, C, H, W) -> (K, C/groups, R, S) = w_shape, contiguous (computed
// KRSC when x or grad_y is channels-last)
Tensor CudaBackend::conv2d_backward_weight(const Tensor& grad_y, const Tensor& x,
                                           const Shape& w_shape, const Conv2dParams& p) {
  const bool cl = raw::is_channels_last(x) || raw::is_channels_last(grad_y);
  Tensor dw = empty_in_layout(w_shape, grad_y, cl);
  if (dw.numel() == 0) return dw;
  if (grad_y.numel() == 0) {
    fill_(dw, 0.0);
  } else {
    auto layout = [cl](const Tensor& t) { return cl ? raw::channels_last(t) : raw::contiguous(t); };
    run_conv({ConvDir::BackwardFilter, layout(x), dw, layout(grad_y), p});
  }
  return raw::contiguous(dw);
}

}  // namespace loom::cuda
