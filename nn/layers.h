// The layers: Linear, Embedding, Conv2d, BatchNorm2d, LayerNorm, RMSNorm, Dropout, ReLU, GELU,
// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, Flatten and Sequential, named and initialised as in
// PyTorch. Each is a thin Module around one op of autograd/ops; one .cpp per family (linear,
// embedding, conv, norm, activation, dropout, pooling, container).
// Leaves out: recurrent layers, padding modes other than zeros; attention and the transformer
// blocks are nn/transformer.h's.
#pragma once

#include <array>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/shape.h"
#include "kernels/params.h"
#include "nn/holder.h"
#include "nn/module.h"

namespace loom::nn {

// A pair of sizes (height, width) that a single number fills: Conv2d(1, 4, 3) or {3, 5}.
struct IntPair {
  int64_t h = 0, w = 0;
  IntPair(int64_t v) : h(v), w(v) {}  // NOLINT: implicit on purpose, as PyTorch's ExpandingArray
  IntPair(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  std::array<int64_t, 2> arr() const { return {h, w}; }
  bool operator==(const IntPair& o) const { return h == o.h && w == o.w; }
};

// ---------------------------------------------------------------- Linear (nn/linear.cpp)

// y = x W^T + b. weight: (out, in), bias: (out). x: (..., in) -> (..., out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // act(forward(x)) as one fused op (Note [Fused linear] in autograd/ops/linalg.cpp); what
  // LinearReLU (nn/fused.h) runs for a Linear followed by a ReLU once nn::fuse has seen them.
  Tensor forward(const Tensor& x, LinearActivation act);
  // weight ~ kaiming_uniform_(a = sqrt(5)), bias ~ U(-1/sqrt(in), 1/sqrt(in)), as PyTorch.
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined without bias
  // Low-rank adapters (nn/lora.h, Note [LoRA]): children lora_A (in -> r) and lora_B (r -> out),
  // and forward adds lora_scale * lora_B(lora_A(dropout(x, lora_dropout))). Null without.
  std::shared_ptr<Linear> lora_A, lora_B;
  double lora_scale = 0.0, lora_dropout = 0.0;
  // The three products in FP8 (fp8_linear, docs/fp8.md): set by nn::convert_to_fp8 (nn/fp8.h),
  // shown as "fp8=tensorwise" when the model is printed.
  bool fp8 = false;
  // Adds the two adapters (rank r, scale alpha / r) and removes them again (nn/lora.cpp).
  void add_lora(int64_t rank, double alpha, double dropout);
  void remove_lora();

 protected:
  // A Linear of these tensors, as they are (no init): weight (out, in), bias (out) or undefined;
  // printed as `type_name` (the tensor-parallel Linears, distributed/tensor_parallel/tp_linear.h).
  Linear(std::string type_name, Tensor weight, Tensor bias);
};

// ---------------------------------------------------------------- Conv2d (nn/conv.cpp)

struct Conv2dOptions {
  IntPair stride = 1, padding = 0, dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x: (N, C, H, W) -> (N, K, P, Q). weight: (K, C/groups, kh, kw), bias: (K).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, IntPair kernel_size,
         Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  // weight ~ kaiming_uniform_(a = sqrt(5)), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  IntPair kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

// ---------------------------------------------------------------- Embedding (nn/embedding.cpp)

// A lookup table: ids (any shape S, int64) -> rows of weight, S + (embedding_dim). weight:
// (num_embeddings, embedding_dim) ~ N(0, 1), as PyTorch. Its gradient adds up the rows of
// repeated ids, deterministically (loom::embedding).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& ids) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;

 protected:
  // An Embedding of this (num_embeddings, embedding_dim) table as it is (no init), printed as
  // `type_name` (the vocabulary-parallel one, distributed/tensor_parallel/vocab_parallel.h).
  Embedding(std::string type_name, Tensor weight);
};

// ---------------------------------------------------------------- normalisation (nn/norm.cpp)

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the new batch in the running stats; nullopt: cumulative average (1 / batches seen).
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // buffers running_mean, running_var, num_batches_tracked
};

// A sum over the processes of a job that autograd differentiates (the gradient of each process's
// input is the same sum of the gradients of the outputs): what a synchronised BatchNorm2d needs
// from distributed/, which implements it over a ProcessGroup (distributed/sync_batch_norm.h), so
// that nn does not depend on distributed.
class CrossProcessSum {
 public:
  virtual ~CrossProcessSum() = default;
  virtual Tensor operator()(const Tensor& t) const = 0;  // same shape, every process's t added
};

// x: (N, C, H, W). Training: batch statistics (and running stats updated); eval: running stats.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op (loom::batch_norm with relu); what BatchNormReLU2d (nn/fused.h)
  // runs. With max_pool2 also a MaxPool2d(2) after the ReLU (loom::batch_norm_relu_max_pool2d),
  // what BatchNormReLUMaxPool2d runs.
  Tensor forward(const Tensor& x, bool relu, bool max_pool2 = false);
  // relu(forward(x) + residual) as one op in training (loom::batch_norm_add_relu): the end of a
  // residual block (nn/resnet.h).
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                    // (C), when affine
  Tensor running_mean, running_var, num_batches_tracked;  // (C), (C), int64 0-d
  // SyncBatchNorm: when set (distributed::convert_sync_batchnorm), training takes its statistics
  // over every process's batch through this sum (Note [SyncBatchNorm], nn/batch_norm_sync.cpp).
  std::shared_ptr<const CrossProcessSum> sync;

 private:
  Tensor forward_synced(const Tensor& x, bool relu, bool max_pool2, double factor);
  void check_input(const Tensor& x) const;
  double count_batch();  // the running stats' momentum for this batch
  Tensor one_;           // the counter's increment, made once per device (not a buffer)
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // weight (ones) and, with bias, bias (zeros)
  bool bias = true;
};

// Normalises over the trailing dims given by normalized_shape: LayerNorm(512) over the last dim
// of size 512, LayerNorm({16, 32}) over the last two.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, LayerNormOptions options = {});
  explicit LayerNorm(int64_t normalized_size, LayerNormOptions options = {})
      : LayerNorm(Shape{normalized_size}, options) {}
  Tensor forward(const Tensor& x) override;
  // The result in y_dtype, cast in the normalising pass (loom::layer_norm's y_dtype): what
  // FusedAddLayerNorm (nn/fused_transformer.h) asks for when a Linear under autocast reads it.
  Tensor forward(const Tensor& x, std::optional<DType> y_dtype);
  // {x + branch, this norm of it} in one forward pass (loom::add_layer_norm): a pre-norm block's
  // residual add and its next layer norm, as FusedAddLayerNorm runs them.
  std::pair<Tensor, Tensor> forward_add(const Tensor& x, const Tensor& branch,
                                        std::optional<DType> y_dtype = std::nullopt);
  void reset_parameters();
  std::string extra_repr() const override;

  Shape normalized_shape;
  LayerNormOptions options;
  Tensor weight, bias;
};

// Llama's RMS norm over the last dim (loom::rms_norm, as Hugging Face's LlamaRMSNorm): a weight
// (ones) and no bias. x: (..., size) -> (..., size).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t size, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t size;
  double eps;
  Tensor weight;
};

// ---------------------------------------------------------------- activations (nn/activation.cpp)

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

// GELU, as torch.nn.GELU: approximate "none" is the exact (erf) form, "tanh" the tanh
// approximation GPT-2 uses (loom::gelu_tanh); anything else is an error naming the value.
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;  // approximate='none'

  std::string approximate;
};

// ---------------------------------------------------------------- Dropout (nn/dropout.cpp)

// In training, zeroes each element with probability p and scales the rest by 1 / (1 - p);
// the identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double p;
};

// ---------------------------------------------------------------- pooling (nn/pooling.cpp)

// What MaxPool2d and AvgPool2d share: the window (kernel_size; options, whose stride defaults to
// the kernel size) checked on construction, and its repr. Options: MaxPool2dOptions or
// AvgPool2dOptions (nn/pooling.cpp instantiates both).
template <typename Options>
class WindowPool2d : public Module {
 public:
  WindowPool2d(const char* name, IntPair kernel_size, Options options);
  std::string extra_repr() const override;

  IntPair kernel_size;
  Options options;
};

struct MaxPool2dOptions {
  std::optional<IntPair> stride;  // default: the kernel size
  IntPair padding = 0;
};
extern template class WindowPool2d<MaxPool2dOptions>;

class MaxPool2d : public WindowPool2d<MaxPool2dOptions> {
 public:
  explicit MaxPool2d(IntPair kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
};

struct AvgPool2dOptions {
  std::optional<IntPair> stride;  // default: the kernel size
  IntPair padding = 0;
  bool count_include_pad = true;
};
extern template class WindowPool2d<AvgPool2dOptions>;

class AvgPool2d : public WindowPool2d<AvgPool2dOptions> {
 public:
  explicit AvgPool2d(IntPair kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x) override;
};

// (N, C, H, W) -> (N, C, OH, OW) with (OH, OW) = output_size.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(IntPair output_size);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  IntPair output_size;
};

// ---------------------------------------------------------------- Flatten and Sequential
// (nn/container.cpp)

// Flattens dims start_dim..end_dim into one: (N, C, H, W) -> (N, C*H*W) by default.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  int64_t start_dim, end_dim;
};

// Runs its children in order, each through its own forward; they are named "0", "1", ... (so
// state_dict names match PyTorch's nn.Sequential). Fused kernels run only where nn::fuse
// (nn/fuse.h) has put fused modules in the children's places.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  // nn::make<Sequential>(nn::make<Linear>(8, 16), nn::make<ReLU>()) (nn/holder.h), or the same
  // with std::make_shared
  template <typename M0, typename... Ms>
  explicit Sequential(std::shared_ptr<M0> first, std::shared_ptr<Ms>... rest)
      : Module("Sequential") {
    push_back(std::move(first));
    (push_back(std::move(rest)), ...);
  }

  void push_back(std::shared_ptr<Module> m);
  // Puts m in the place of child i (keeping its name "i"); see Module::replace_child.
  void replace(size_t i, std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th child as its own type; an error naming both types if it is not one.
  template <typename M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    LOOM_CHECK(m != nullptr, "Sequential::at: child ", i, " is a ", (*this)[i]->type_name(),
               ", not the requested type");
    return m;
  }

 protected:
  // A Sequential printed under another name (nn::TransformerStack).
  explicit Sequential(std::string type_name) : Module(std::move(type_name)) {}
};

}  // namespace loom::nn
