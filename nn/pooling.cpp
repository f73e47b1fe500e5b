// Pooling modules: MaxPool2d, AvgPool2d (stride defaults to the kernel size, as PyTorch) and
// AdaptiveAvgPool2d, around the ops of the same names.
// Leaves out: dilation and ceil_mode, adaptive max pooling.
#include "autograd/ops/conv_pool.h"
#include "nn/layers.h"

namespace loom::nn {

namespace {
void check_input(const char* name, const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4, name, ": expected input (N, C, H, W), got ",
             x.defined() ? describe(x) : std::string("an undefined tensor"));
}

// The window of a pooling module, as the pooling ops take it.
template <typename Options>
Pool2dParams window_params(IntPair k, const Options& o) {
  Pool2dParams p;
  p.kernel = k.arr();
  p.stride = o.stride->arr();
  p.padding = o.padding.arr();
  return p;
}
}  // namespace

// The window checked, its stride defaulted to the kernel size (as PyTorch).
template <typename Options>
WindowPool2d<Options>::WindowPool2d(const char* name, IntPair k, Options o)
    : Module(name), kernel_size(k), options(o) {
  if (!options.stride) options.stride = k;
  const IntPair stride = *options.stride, pad = options.padding;
  LOOM_CHECK(k.h > 0 && k.w > 0 && stride.h > 0 && stride.w > 0, name, ": kernel (", k.h, ", ", k.w,
             ") and stride (", stride.h, ", ", stride.w, ") must be positive");
  LOOM_CHECK(pad.h >= 0 && pad.w >= 0 && 2 * pad.h <= k.h && 2 * pad.w <= k.w, name, ": padding (",
             pad.h, ", ", pad.w, ") must be non-negative and at most half the kernel (", k.h, ", ",
             k.w, ")");
}

template <typename Options>
std::string WindowPool2d<Options>::extra_repr() const {
  const IntPair k = kernel_size, s = *options.stride, p = options.padding;
  return str("kernel_size=(", k.h, ", ", k.w, "), stride=(", s.h, ", ", s.w, "), padding=(", p.h,
             ", ", p.w, ")");
}

template class WindowPool2d<MaxPool2dOptions>;
template class WindowPool2d<AvgPool2dOptions>;

MaxPool2d::MaxPool2d(IntPair k, MaxPool2dOptions opt) : WindowPool2d("MaxPool2d", k, opt) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_input("MaxPool2d", x);
  return max_pool2d(x, window_params(kernel_size, options));
}

AvgPool2d::AvgPool2d(IntPair k, AvgPool2dOptions opt) : WindowPool2d("AvgPool2d", k, opt) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_input("AvgPool2d", x);
  Pool2dParams p = window_params(kernel_size, options);
  p.count_include_pad = options.count_include_pad;
  return avg_pool2d(x, p);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(IntPair out) : Module("AdaptiveAvgPool2d"), output_size(out) {
  LOOM_CHECK(out.h > 0 && out.w > 0, "AdaptiveAvgPool2d: output size (", out.h, ", ", out.w,
             ") must be positive");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  check_input("AdaptiveAvgPool2d", x);
  return adaptive_avg_pool2d(x, output_size.arr());
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return str("output_size=(", output_size.h, ", ", output_size.w, ")");
}

}  // namespace loom::nn
