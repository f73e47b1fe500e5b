// Tensor: a cheap, refcounted handle to a TensorImpl (storage, sizes, strides, offset, dtype,
// device) plus the optional autograd metadata (requires_grad, grad, grad_fn, hooks).
// Leaves out: the math. See Note [Where Tensor's methods live].
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace loom {

namespace autograd {
struct Node;
}

class TensorImpl;
struct AutogradMeta;

// Note [Where Tensor's methods live]
// core/ is the lowest floor: it knows memory and metadata, not kernels or autograd. The methods
// below that compute (reshape, sum, operator+, backward...) are declared here so users can write
// `x.view({-1, 784}).sum()`, but they are defined in autograd/ops/ (and autograd/engine.cpp),
// where they record the graph and call the kernels. The non-differentiable view arithmetic they
// build on is in core/tensor_views.h (namespace loom::raw).

// Options for factories: zeros({2, 3}, {.dtype = kF64, .device = cuda_device(0)}).
struct Options {
  DType dtype = DType::F32;
  Device device = Device();
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (no storage); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata (core) ----
  const Shape& shape() const;
  const Strides& strides() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t offset() const;  // in elements from the start of the storage
  DType dtype() const;
  Device device() const;
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }

  const std::shared_ptr<Storage>& storage() const;
  void* data_ptr() const;  // start of this tensor's first element
  template <typename T>
  T* data() const {
    check_dtype_for_data(DTypeOf<T>::value);
    return static_cast<T*>(data_ptr());
  }

  // ---- autograd metadata (core) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // only on leaves
  Tensor grad() const;                     // undefined until a backward reaches this leaf
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  bool is_leaf() const;
  AutogradMeta* autograd_meta() const;  // nullptr when the tensor never needed grad
  AutogradMeta& ensure_autograd_meta() const;
  uint64_t version() const;
  void bump_version() const;
  Tensor detach() const;  // shares storage, no autograd history
  // Points this tensor at src's data (storage, shape, strides, dtype, device) and keeps its
  // identity and autograd metadata (requires_grad, name, hooks): every handle to it, such as an
  // optimizer's, sees the new data. PyTorch's `p.data = src`; Module::to moves parameters so.
  // src must be a leaf; a gradient that no longer matches the data is dropped.
  void set_data(const Tensor& src) const;
  // A name for error messages (nn::Module sets it to the parameter's dotted name).
  void set_name(const std::string& n) const;
  std::string name() const;

  // ---- autograd (defined in autograd/engine.cpp) ----
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- differentiable views and copies (defined in autograd/ops/shape.cpp) ----
  Tensor view(const Shape& s) const;
  Tensor reshape(const Shape& s) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // transpose of a 2-d tensor
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& s) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;  // all size-1 dims
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType t) const;
  Tensor to(Device d) const;

  // ---- reading values (defined in autograd/ops/tensor_methods.cpp) ----
  template <typename T>
  T item() const;
  double item() const;  // any dtype, as double
  template <typename T>
  std::vector<T> to_vector() const;  // contiguous copy on the host, in T's dtype

  // ---- math shortcuts (defined in autograd/ops/tensor_methods.cpp) ----
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;
  Tensor pow(double p) const;
  Tensor matmul(const Tensor& other) const;

  // ---- in place, never recorded by autograd (defined in autograd/ops/inplace.cpp) ----
  // Each bumps the version counter. On a tensor that requires grad they are allowed only under
  // NoGradGuard (optimizers, initialisers); otherwise they raise an error naming the op.
  Tensor& zero_();
  Tensor& fill_(double v);
  Tensor& copy_(const Tensor& src);  // src broadcasts to this; dtype and device may differ
  Tensor& add_(const Tensor& o, double alpha = 1.0);
  Tensor& sub_(const Tensor& o);
  Tensor& mul_(const Tensor& o);
  Tensor& mul_(double s);
  Tensor& div_(double s);
  // this[..., index[k], ...] = src[..., k, ...] along dim (index: 1-d int64 on this device; src:
  // this shape with dim replaced by the index length, this dtype). With the index on the GPU no
  // value is read back, so a CUDA graph can replay it with a new index (the static KV cache's
  // slot).
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& src);

 private:
  void check_dtype_for_data(DType want) const;
  std::shared_ptr<TensorImpl> impl_;
};

using Hook = std::function<void(const Tensor&)>;

// Autograd state of one tensor. Created lazily: most tensors (inputs, no-grad math) never have it.
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                                     // leaves only
  std::shared_ptr<autograd::Node> grad_fn;         // non-leaves: the node that produced it
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: cached AccumulateGrad node
  std::vector<Hook> post_accumulate_hooks;         // leaves: run after .grad was updated
  std::string name;
};

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, Shape sizes, Strides strides, int64_t offset,
             DType dtype)
      : storage_(std::move(storage)),
        sizes_(std::move(sizes)),
        strides_(std::move(strides)),
        offset_(offset),
        dtype_(dtype) {}

  const std::shared_ptr<Storage>& storage() const { return storage_; }
  const Shape& sizes() const { return sizes_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_->device; }
  int64_t numel() const { return loom::numel(sizes_); }
  bool is_contiguous() const;

  std::unique_ptr<AutogradMeta> autograd;  // null until needed

  // Takes o's data and layout (Tensor::set_data); the autograd metadata stays.
  void set_data_from(const TensorImpl& o) {
    storage_ = o.storage_;
    sizes_ = o.sizes_;
    strides_ = o.strides_;
    offset_ = o.offset_;
    dtype_ = o.dtype_;
  }

 private:
  std::shared_ptr<Storage> storage_;
  Shape sizes_;
  Strides strides_;
  int64_t offset_;
  DType dtype_;
};

// ---- inline metadata accessors ----
inline const Shape& Tensor::shape() const { return impl_->sizes(); }
inline const Strides& Tensor::strides() const { return impl_->strides(); }
inline int64_t Tensor::dim() const { return int64_t(impl_->sizes().size()); }
inline int64_t Tensor::numel() const { return impl_->numel(); }
inline int64_t Tensor::offset() const { return impl_->offset(); }
inline DType Tensor::dtype() const { return impl_->dtype(); }
inline Device Tensor::device() const { return impl_->device(); }
inline bool Tensor::is_contiguous() const { return impl_->is_contiguous(); }
inline const std::shared_ptr<Storage>& Tensor::storage() const { return impl_->storage(); }
[[noreturn]] void released_storage_error(const Tensor& t);  // Note [Released storage]
inline void* Tensor::data_ptr() const {
  const Storage& s = *impl_->storage();
  if (s.released()) [[unlikely]]
    released_storage_error(*this);
  return static_cast<char*>(s.ptr()) + impl_->offset() * int64_t(element_size());
}

// t.data<T>(), or nullptr where t is undefined (an optional operand: a norm's weight, a residual).
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// ---- core constructors ----
// An uninitialised contiguous tensor.
Tensor empty(const Shape& shape, Options opt = {});
// A tensor that shares `src`'s storage with new sizes/strides/offset (no autograd).
Tensor make_view(const Tensor& src, Shape sizes, Strides strides, int64_t offset);
// A contiguous CPU tensor holding a copy of `values`.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, bool requires_grad = false);

// dtype shorthands
constexpr DType kF32 = DType::F32, kF64 = DType::F64, kF16 = DType::F16, kBF16 = DType::BF16,
                kI64 = DType::I64, kI32 = DType::I32, kU8 = DType::U8, kBool = DType::Bool;

// A one-line description for error messages: "float32 [2, 3] on cuda:0".
std::string describe(const Tensor& t);
// Prints values (PyTorch-like, summarised when large); defined in autograd/ops/print.cpp.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace loom
