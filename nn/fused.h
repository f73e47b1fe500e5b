// The fused modules that nn::fuse (nn/fuse.h) puts into a Sequential in place of a run of layers,
// named as PyTorch's torch.ao.nn.intrinsic: LinearReLU, BatchNormReLU2d, BatchNormReLUMaxPool2d;
// and Identity, which takes the places of the layers a fused module absorbed. Each runs one fused
// op, and falls back on its original layers (the composite, the reference) in anomaly mode.
// Leaves out: the table of patterns (nn/fuse.cpp), fusions across a module's own forward (a
// residual add inside a block), unfusing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace loom::nn {

// Note [Fused modules keep the unfused keys]
// A fused module takes the place of the first layer of its run, under the same name ("1"), and
// lists that layer's parameters and buffers as its own (Module::share_members_of, as DDP's
// wrapper does): the same tensors, not copies. The layers after it become Identity, which holds
// nothing. So state_dict() keys and their order, named_parameters() and its order (DDP's buckets
// follow it) are byte-identical before and after nn::fuse; a checkpoint saved from either model
// loads into the other; an optimizer made before fuse still steps the same tensors. The fused
// module also keeps every original layer (not registered as children, so they add no keys):
// train()/eval() reach them, and in anomaly mode forward runs them one by one, as the unfused
// Sequential did, so a NaN is still reported against the layer that made it.
class FusedModule : public Module {
 public:
  // Propagates to the original layers too (BatchNorm2d reads its own training flag).
  void train(bool on = true) override;
  // "Linear(in_features=8, out_features=16, bias=true), ReLU()": the layers it runs as one.
  std::string extra_repr() const override;
  // The original layers, in order: the first one's tensors are this module's.
  const std::vector<std::shared_ptr<Module>>& parts() const { return parts_; }

 protected:
  FusedModule(std::string type_name, std::vector<std::shared_ptr<Module>> parts);
  // The unfused path: each original layer's forward in turn (the reference the fused op equals).
  Tensor composite(const Tensor& x);

 private:
  std::vector<std::shared_ptr<Module>> parts_;
};

// relu(linear(x)) as one op: loom::linear with the ReLU epilogue (Note [Fused linear] in
// autograd/ops/linalg.cpp; one cuBLASLt GEMM on CUDA). x: (..., in) -> (..., out).
class LinearReLU : public FusedModule {
 public:
  LinearReLU(std::shared_ptr<Linear> linear, std::shared_ptr<ReLU> relu);
  Tensor forward(const Tensor& x) override;

  const std::shared_ptr<Linear> linear;
};

// relu(batch_norm(x)) as one op: loom::batch_norm with relu = true (the ReLU in the normalising
// pass, its mask in the backward's reads). x: (N, C, H, W) -> (N, C, H, W).
class BatchNormReLU2d : public FusedModule {
 public:
  BatchNormReLU2d(std::shared_ptr<BatchNorm2d> bn, std::shared_ptr<ReLU> relu);
  Tensor forward(const Tensor& x) override;

  const std::shared_ptr<BatchNorm2d> bn;
};

// max_pool2d(relu(batch_norm(x)), 2) as one op: loom::batch_norm_relu_max_pool2d (Note [Batch
// norm into max pool] in kernels/cuda/norm/cuda_batch_norm_pool.cu: on CUDA, in training, the
// full-size activation is never written; elsewhere the op composes). x: (N, C, H, W) -> (N, C, H/2,
// W/2).
class BatchNormReLUMaxPool2d : public FusedModule {
 public:
  // pool must be a MaxPool2d(2): 2 x 2 window, stride 2, no padding (is_max_pool_2).
  BatchNormReLUMaxPool2d(std::shared_ptr<BatchNorm2d> bn, std::shared_ptr<ReLU> relu,
                         std::shared_ptr<MaxPool2d> pool);
  Tensor forward(const Tensor& x) override;

  const std::shared_ptr<BatchNorm2d> bn;
};

// A MaxPool2d with a 2 x 2 window, stride 2 and no padding: the one batch_norm_relu_max_pool2d
// fuses.
bool is_max_pool_2(const MaxPool2d& pool);

// Passes its input through. note: what it stands for, printed as Identity(<note>)
// ("ReLU, fused into 1" where nn::fuse put it).
class Identity : public Module {
 public:
  explicit Identity(std::string note = "") : Module("Identity"), note(std::move(note)) {}
  Tensor forward(const Tensor& x) override { return x; }
  std::string extra_repr() const override { return note; }

  std::string note;
};

}  // namespace loom::nn
