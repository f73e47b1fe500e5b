// Conv2d: a 2-d convolution over NCHW inputs through loom::conv2d, initialised as in PyTorch.
// Leaves out: padding modes other than zeros, "same" padding, Conv1d/Conv3d.
#include <cmath>

#include "autograd/ops/conv_pool.h"
#include "autograd/ops/factory.h"
#include "nn/init.h"
#include "nn/layers.h"

namespace loom::nn {

Conv2d::Conv2d(int64_t in, int64_t out, IntPair k, Conv2dOptions opt)
    : Module("Conv2d"), in_channels(in), out_channels(out), kernel_size(k), options(opt) {
  LOOM_CHECK(in > 0 && out > 0 && k.h > 0 && k.w > 0, "Conv2d: channels (", in, ", ", out,
             ") and kernel size (", k.h, ", ", k.w, ") must be positive");
  LOOM_CHECK(opt.groups > 0 && in % opt.groups == 0 && out % opt.groups == 0, "Conv2d: groups ",
             opt.groups, " must divide in_channels ", in, " and out_channels ", out);
  LOOM_CHECK(opt.stride.h > 0 && opt.stride.w > 0 && opt.dilation.h > 0 && opt.dilation.w > 0 &&
                 opt.padding.h >= 0 && opt.padding.w >= 0,
             "Conv2d: stride (", opt.stride.h, ", ", opt.stride.w, ") and dilation (",
             opt.dilation.h, ", ", opt.dilation.w, ") must be positive and padding (",
             opt.padding.h, ", ", opt.padding.w, ") non-negative");
  weight = init::new_parameter({out, in / opt.groups, k.h, k.w});
  register_parameter("weight", weight);
  if (opt.bias) {
    bias = init::new_parameter({out});
    register_parameter("bias", bias);
  }
  reset_parameters();
}

void Conv2d::reset_parameters() {
  // See Note [PyTorch's default init] in nn/linear.cpp.
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = 1.0 / std::sqrt(double(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == in_channels, "Conv2d(", in_channels, ", ",
             out_channels, "): expected input (N, ", in_channels, ", H, W), got ",
             x.defined() ? describe(x) : std::string("an undefined tensor"));
  Conv2dParams p;
  p.stride = options.stride.arr();
  p.padding = options.padding.arr();
  p.dilation = options.dilation.arr();
  p.groups = options.groups;
  return conv2d(x, weight, bias, p);
}

std::string Conv2d::extra_repr() const {
  auto pair = [](IntPair v) { return str("(", v.h, ", ", v.w, ")"); };
  std::string s = str(in_channels, ", ", out_channels, ", kernel_size=", pair(kernel_size),
                      ", stride=", pair(options.stride));
  if (!(options.padding == IntPair(0))) s += ", padding=" + pair(options.padding);
  if (!(options.dilation == IntPair(1))) s += ", dilation=" + pair(options.dilation);
  if (options.groups != 1) s += str(", groups=", options.groups);
  if (!options.bias) s += ", bias=false";
  return s;
}

}  // namespace loom::nn
