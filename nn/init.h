// Parameter initialisers, as torch.nn.init: uniform_, normal_, constant_, zeros_, ones_,
// kaiming_uniform_/normal_ and xavier_uniform_/normal_. They fill a tensor in place (under
// NoGradGuard) from loom's Philox generator, so loom::manual_seed makes a model's initial weights
// reproducible, on any device.
// Also where modules make their parameters (new_parameter, ParameterScope).
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

// Note [Where a module makes its parameters]
// A module's constructor makes each parameter with new_parameter(shape): an uninitialised tensor
// on the CPU in float32, unless a ParameterScope is active on this thread; then on the scope's
// device in its dtype, and with skip_init the random initialisers (uniform_, normal_ and those
// built on them) leave the tensors as they are (constant_, zeros_ and ones_ still fill). A loader
// whose checkpoint overwrites every weight builds the model that way (nn/hf_llama.cpp): an 8B
// Llama straight on the GPU in bf16, without first a 32 GB float32 copy on the host and 8 billion
// random draws. Scopes nest; the innermost wins. Buffers (batch norm's running statistics) and the
// parameters a model makes with other factories stay on the CPU until Module::to moves them.
class ParameterScope {
 public:
  explicit ParameterScope(Device device, DType dtype = kF32, bool skip_init = false);
  ~ParameterScope();
  ParameterScope(const ParameterScope&) = delete;
  ParameterScope& operator=(const ParameterScope&) = delete;

 private:
  struct State {
    bool active = false;
    Device device;
    DType dtype = kF32;
    bool skip_init = false;
  };
  State outer_;
  friend Tensor new_parameter(const Shape& shape);
  friend bool skipping_init();
  static State& current();
};

// An uninitialised parameter tensor of `shape` where the innermost ParameterScope says (the CPU,
// float32 without one).
Tensor new_parameter(const Shape& shape);
// Whether the random initialisers do nothing now (a ParameterScope with skip_init).
bool skipping_init();

}  // namespace loom::nn::init
