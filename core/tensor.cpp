// Tensor and TensorImpl: metadata, autograd metadata, and the core constructors.
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/checked_math.h"

namespace loom {

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = int64_t(sizes_.size()) - 1; i >= 0; --i) {
    if (sizes_[i] == 1) continue;  // the stride of a size-1 dim never matters
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim("size", d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim("stride", d, dim())]; }

void Tensor::check_dtype_for_data(DType want) const {
  LOOM_CHECK(defined(), "data<", dtype_name(want), ">: the tensor is undefined");
  LOOM_CHECK(dtype() == want, "data<", dtype_name(want), ">: the tensor holds ",
             dtype_name(dtype()));
}

// ---- autograd metadata ----

AutogradMeta* Tensor::autograd_meta() const { return impl_ ? impl_->autograd.get() : nullptr; }

AutogradMeta& Tensor::ensure_autograd_meta() const {
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  return *impl_->autograd;
}

bool Tensor::requires_grad() const {
  auto* m = autograd_meta();
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  LOOM_CHECK(defined(), "requires_grad_: the tensor is undefined");
  LOOM_CHECK(is_leaf(),
             "requires_grad_: only leaf tensors can change requires_grad (this one was made by ",
             "an op); use detach() to get a leaf");
  LOOM_CHECK(!on || is_floating_point(),
             "requires_grad_: only floating tensors can require grad, got ", describe(*this));
  ensure_autograd_meta().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  auto* m = autograd_meta();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    LOOM_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(),
               "set_grad: gradient ", describe(g), " does not match the tensor ", describe(*this));
  }
  ensure_autograd_meta().grad = g;
}

static const std::shared_ptr<autograd::Node> kNoNode;

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  auto* m = autograd_meta();
  return m ? m->grad_fn : kNoNode;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint64_t Tensor::version() const { return storage()->version; }
void Tensor::bump_version() const { ++storage()->version; }

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

void Tensor::set_data(const Tensor& src) const {
  LOOM_CHECK(defined() && src.defined(), "set_data: undefined tensor (this ",
             defined() ? describe(*this) : std::string("undefined"), ", src ",
             src.defined() ? describe(src) : std::string("undefined"), ")");
  LOOM_CHECK(src.is_leaf(), "set_data: src ", describe(src),
             " was made by an op; pass src.detach()");
  LOOM_CHECK(!requires_grad() || src.is_floating_point(), "set_data: ", name(),
             " requires grad and cannot hold ", describe(src));
  if (src.impl() == impl()) return;
  impl_->set_data_from(*src.impl());
  if (AutogradMeta* m = autograd_meta()) {
    if (m->grad.defined() &&
        (m->grad.shape() != shape() || m->grad.dtype() != dtype() || m->grad.device() != device()))
      m->grad = Tensor();
  }
}

void Tensor::set_name(const std::string& n) const { ensure_autograd_meta().name = n; }
std::string Tensor::name() const {
  auto* m = autograd_meta();
  return m ? m->name : std::string();
}

// ---- constructors ----

Tensor empty(const Shape& shape, Options opt) {
  auto storage =
      make_storage(size_t(checked_nbytes("empty", shape, dtype_size(opt.dtype))), opt.device);
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0,
                                        opt.dtype));
  if (opt.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor make_view(const Tensor& src, Shape sizes, Strides strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(src.storage(), std::move(sizes), std::move(strides),
                                             offset, src.dtype()));
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, bool requires_grad) {
  LOOM_CHECK(int64_t(values.size()) == checked_numel("from_vector", shape),
             "from_vector: ", values.size(), " values do not fill shape ", shape, " (",
             numel(shape), " elements)");
  Tensor t = empty(shape, {.dtype = DTypeOf<T>::value});
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = t.data<bool>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  } else if (!values.empty()) {
    std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  if (requires_grad) t.requires_grad_(true);
  return t;
}

template Tensor from_vector(const std::vector<float>&, const Shape&, bool);
template Tensor from_vector(const std::vector<double>&, const Shape&, bool);
template Tensor from_vector(const std::vector<Half>&, const Shape&, bool);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&, bool);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, bool);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, bool);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, bool);
template Tensor from_vector(const std::vector<bool>&, const Shape&, bool);

void released_storage_error(const Tensor& t) {
  const std::string name = t.name(), by = t.storage()->released_by;
  // FSDP's units ("FSDP unit 'h.0' ...") are gathered again on use; other releasers (a pipeline
  // stage's rank dropping the other stages' parameters) say in `by` why the data is gone.
  const bool fsdp = by.empty() || by.rfind("FSDP", 0) == 0;
  LOOM_FAIL("the data of ", name.empty() ? std::string("a tensor") : "\"" + name + "\"", " (",
            describe(t), ") was released", by.empty() ? "" : " by " + by,
            fsdp ? ": it is a parameter sharded by FullyShardedDataParallel (or a view of one), "
                   "which exists only while its unit runs. Call the model through its FSDP "
                   "wrapper (or the unit through operator() / call_hooked), or gather the "
                   "parameters first (FullyShardedDataParallel::full_params)"
                 : "");
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  std::ostringstream os;
  os << dtype_name(t.dtype()) << ' ' << t.shape() << " on " << t.device();
  return os.str();
}

}  // namespace loom
