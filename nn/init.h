// Parameter initialisers, as torch.nn.init: uniform_, normal_, constant_, zeros_, ones_,
// kaiming_uniform_/normal_ and xavier_uniform_/normal_. They fill a tensor in place (under
// NoGradGuard) from loom's Philox generator, so loom::manual_seed makes a model's initial weights
// reproducible, on any device.
// Leaves out: orthogonal_, sparse_, trunc_normal_ (no loom model uses them).
#pragma once

#include <utility>

#include "core/generator.h"
#include "core/tensor.h"

namespace loom::nn::init {

enum class Nonlinearity { Linear, Conv2d, Sigmoid, Tanh, ReLU, LeakyReLU };
enum class FanMode { FanIn, FanOut };

// The recommended gain for a nonlinearity (param: the negative slope of LeakyReLU).
double calculate_gain(Nonlinearity nl, double param = 0.01);
// (fan_in, fan_out) of a weight with at least 2 dims: (out, in, *kernel) -> (in*k, out*k).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);

// Each returns its argument, filled. gen defaults to the default generator.
Tensor uniform_(const Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);
// U(-bound, bound), bound = gain * sqrt(3 / fan); with a = sqrt(5) and fan_in (what Linear and
// Conv2d use) bound = 1 / sqrt(fan_in).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nl = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
// N(0, std^2), std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nl = Nonlinearity::LeakyReLU, Generator* gen = nullptr);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace loom::nn::init
