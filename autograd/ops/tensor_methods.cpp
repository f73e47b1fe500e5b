// The Tensor methods that compute: each forwards to the free function of the same name, so the
// method and the function are one op (see Note [Where Tensor's methods live] in core/tensor.h).
#include "autograd/ops/ops.h"
#include "kernels/raw_ops.h"

namespace loom {

Tensor Tensor::view(const Shape& s) const { return loom::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return loom::reshape(*this, s); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return loom::permute(*this, dims);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return loom::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  LOOM_CHECK(dim() == 2, "t: expected a 2-d tensor, got ", describe(*this));
  return loom::transpose(*this, 0, 1);
}
Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return loom::slice(*this, d, start, end, step);
}
Tensor Tensor::select(int64_t d, int64_t index) const { return loom::select(*this, d, index); }
Tensor Tensor::expand(const Shape& s) const { return loom::expand(*this, s); }
Tensor Tensor::squeeze(int64_t d) const { return loom::squeeze(*this, d); }
Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return loom::reshape(*this, s);
}
Tensor Tensor::unsqueeze(int64_t d) const { return loom::unsqueeze(*this, d); }
Tensor Tensor::flatten(int64_t start, int64_t end) const {
  return loom::flatten(*this, start, end);
}
Tensor Tensor::contiguous() const { return loom::contiguous(*this); }
Tensor Tensor::clone() const { return loom::clone(*this); }
Tensor Tensor::to(DType t) const { return loom::to(*this, t); }
Tensor Tensor::to(Device d) const { return loom::to(*this, d); }

Tensor Tensor::sum() const { return loom::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const {
  return loom::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return loom::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const {
  return loom::mean(*this, dims, keepdim);
}
Tensor Tensor::argmax(int64_t d, bool keepdim) const { return loom::argmax(*this, d, keepdim); }
Tensor Tensor::exp() const { return loom::exp(*this); }
Tensor Tensor::log() const { return loom::log(*this); }
Tensor Tensor::relu() const { return loom::relu(*this); }
Tensor Tensor::pow(double p) const { return loom::pow(*this, p); }
Tensor Tensor::matmul(const Tensor& o) const { return loom::matmul(*this, o); }

// ---- reading values back to the host ----

template <typename T>
std::vector<T> Tensor::to_vector() const {
  LOOM_CHECK(defined(), "to_vector: the tensor is undefined");
  // Host copy in T's dtype, contiguous (one device-to-host copy at most).
  Tensor host = empty(shape(), {.dtype = DTypeOf<T>::value});
  backend_for(device()).copy_(host, *this);
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

template <typename T>
T Tensor::item() const {
  LOOM_CHECK(defined() && numel() == 1, "item: expected a tensor of one element, got ",
             describe(*this));
  return to_vector<T>()[0];
}

double Tensor::item() const { return item<double>(); }

#define LOOM_INSTANTIATE(T)                             \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
LOOM_INSTANTIATE(float)
LOOM_INSTANTIATE(double)
LOOM_INSTANTIATE(int64_t)
LOOM_INSTANTIATE(int32_t)
LOOM_INSTANTIATE(uint8_t)
LOOM_INSTANTIATE(Half)
LOOM_INSTANTIATE(BFloat16)
#undef LOOM_INSTANTIATE

template <>
std::vector<bool> Tensor::to_vector<bool>() const {
  auto bytes = to(DType::U8).to_vector<uint8_t>();
  return std::vector<bool>(bytes.begin(), bytes.end());
}
template <>
bool Tensor::item<bool>() const {
  return item<uint8_t>() != 0;
}

}  // namespace loom
