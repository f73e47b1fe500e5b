// BatchNorm2d, LayerNorm and RMSNorm modules: parameters, running-stat buffers and PyTorch's rules
// for which statistics are used in training and eval, around loom::batch_norm, loom::layer_norm
// and loom::rms_norm.
// Leaves out: BatchNorm1d/3d, GroupNorm; SyncBatchNorm's training path is nn/batch_norm_sync.cpp.
#include "autograd/ops/norm.h"

#include "autograd/grad_mode.h"
#include "autograd/ops/elementwise.h"
#include "autograd/ops/factory.h"
#include "nn/init.h"
#include "nn/layers.h"

namespace loom::nn {

// ---------------------------------------------------------------- BatchNorm2d

BatchNorm2d::BatchNorm2d(int64_t c, BatchNormOptions opt)
    : Module("BatchNorm2d"), num_features(c), options(opt) {
  LOOM_CHECK(c > 0, "BatchNorm2d: num_features ", c, " must be positive");
  LOOM_CHECK(opt.eps > 0, "BatchNorm2d: eps ", opt.eps, " must be positive");
  if (opt.affine) {
    weight = init::new_parameter({c});
    bias = init::new_parameter({c});
    register_parameter("weight", weight);
    register_parameter("bias", bias);
  }
  if (opt.track_running_stats) {
    running_mean = zeros({c});
    running_var = ones({c});
    num_batches_tracked = zeros({}, {.dtype = kI64});
    register_buffer("running_mean", running_mean);
    register_buffer("running_var", running_var);
    register_buffer("num_batches_tracked", num_batches_tracked);
  }
  reset_parameters();
}

void BatchNorm2d::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNorm2d::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) { return forward(x, false); }

void BatchNorm2d::check_input(const Tensor& x) const {
  LOOM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_features, "BatchNorm2d(", num_features,
             "): expected input (N, ", num_features, ", H, W), got ",
             x.defined() ? describe(x) : std::string("an undefined tensor"));
}

double BatchNorm2d::count_batch() {
  // As torch.nn.BatchNorm2d: count batches in training; with momentum = nullopt the running
  // stats are a cumulative average (factor 1 / batches seen).
  double factor = options.momentum.value_or(0.0);
  if (is_training() && options.track_running_stats) {
    NoGradGuard g;
    // One kernel per step: the increment is kept, not filled again (a ResNet-50 step has 53).
    if (!one_.defined() || one_.device() != num_batches_tracked.device())
      one_ = ones_like(num_batches_tracked);
    num_batches_tracked.add_(one_);
    if (!options.momentum) factor = 1.0 / num_batches_tracked.item();
  }
  return factor;
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  check_input(x);
  const double factor = count_batch();
  if (sync && is_training()) return relu(forward_synced(x, false, false, factor) + residual);
  const bool pass_running = !is_training() || options.track_running_stats;
  return batch_norm_add_relu(x, residual, weight, bias, pass_running ? running_mean : Tensor(),
                             pass_running ? running_var : Tensor(),
                             is_training() || !options.track_running_stats, factor, options.eps);
}

Tensor BatchNorm2d::forward(const Tensor& x, bool relu, bool max_pool2) {
  check_input(x);
  const double factor = count_batch();
  if (sync && is_training()) return forward_synced(x, relu, max_pool2, factor);
  // Batch statistics in training, and in eval when there are no running stats.
  bool use_batch_stats = is_training() || !options.track_running_stats;
  bool pass_running = !is_training() || options.track_running_stats;
  const Tensor rm = pass_running ? running_mean : Tensor(),
               rv = pass_running ? running_var : Tensor();
  if (max_pool2)
    return batch_norm_relu_max_pool2d(x, weight, bias, rm, rv, use_batch_stats, factor,
                                      options.eps);
  return batch_norm(x, weight, bias, rm, rv, use_batch_stats, factor, options.eps, relu);
}

std::string BatchNorm2d::extra_repr() const {
  return str(num_features, ", eps=", options.eps,
             ", momentum=", options.momentum ? str(*options.momentum) : std::string("none"),
             ", affine=", options.affine ? "true" : "false",
             ", track_running_stats=", options.track_running_stats ? "true" : "false");
}

// ---------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(Shape shape, LayerNormOptions opt)
    : Module("LayerNorm"), normalized_shape(std::move(shape)), options(opt) {
  LOOM_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t d : normalized_shape)
    LOOM_CHECK(d > 0, "LayerNorm: normalized_shape ", normalized_shape, " has a non-positive size");
  if (opt.elementwise_affine) {
    weight = init::new_parameter(normalized_shape);
    register_parameter("weight", weight);
    if (opt.bias) {
      bias = init::new_parameter(normalized_shape);
      register_parameter("bias", bias);
    }
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

namespace {
void check_layer_norm_input(const Shape& normalized_shape, const Tensor& x) {
  size_t k = normalized_shape.size();
  bool ok = x.defined() && size_t(x.dim()) >= k;
  for (size_t i = 0; ok && i < k; ++i) ok = x.size(int64_t(x.dim() - k + i)) == normalized_shape[i];
  LOOM_CHECK(ok, "LayerNorm(", normalized_shape, "): input ",
             x.defined() ? describe(x) : std::string("undefined"), " should end in ",
             normalized_shape);
}
}  // namespace

Tensor LayerNorm::forward(const Tensor& x) { return forward(x, std::nullopt); }

Tensor LayerNorm::forward(const Tensor& x, std::optional<DType> y_dtype) {
  check_layer_norm_input(normalized_shape, x);
  return layer_norm(x, normalized_shape, weight, bias, options.eps, y_dtype);
}

std::pair<Tensor, Tensor> LayerNorm::forward_add(const Tensor& x, const Tensor& branch,
                                                 std::optional<DType> y_dtype) {
  check_layer_norm_input(normalized_shape, x);
  return add_layer_norm(x, branch, normalized_shape, weight, bias, options.eps, y_dtype);
}

std::string LayerNorm::extra_repr() const {
  return str(normalized_shape, ", eps=", options.eps,
             ", elementwise_affine=", options.elementwise_affine ? "true" : "false");
}

// ---------------------------------------------------------------- RMSNorm

RMSNorm::RMSNorm(int64_t size_, double eps_) : Module("RMSNorm"), size(size_), eps(eps_) {
  LOOM_CHECK(size > 0, "RMSNorm: size ", size, " must be positive");
  LOOM_CHECK(eps > 0.0, "RMSNorm: eps ", eps, " must be positive");
  weight = init::new_parameter({size});
  register_parameter("weight", weight);
  reset_parameters();
}

void RMSNorm::reset_parameters() { init::ones_(weight); }

Tensor RMSNorm::forward(const Tensor& x) {  // (..., size) -> (..., size)
  LOOM_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == size, "RMSNorm(", size, "): input ",
             x.defined() ? describe(x) : std::string("undefined"), " should end in ", size);
  return rms_norm(x, weight, eps);
}

std::string RMSNorm::extra_repr() const { return str(size, ", eps=", eps); }

}  // namespace loom::nn
