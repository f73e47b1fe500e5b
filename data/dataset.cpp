// Dataset defaults, TensorDataset, collate and the row gather behind the loader's fast path.
#include "data/dataset.h"

#include <cstring>

#include "autograd/grad_mode.h"
#include "autograd/ops/shape.h"
#include "core/tensor_views.h"
#include "kernels/raw_ops.h"

namespace loom::data {

namespace {

size_t row_bytes(const Tensor& t) {
  return t.size(0) == 0 ? size_t(0) : size_t(t.numel() / t.size(0)) * t.element_size();
}

Shape with_batch(int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

}  // namespace

void gather_rows(const char* what, const Tensor& src, std::span<const int64_t> indices,
                 const Tensor& dst) {
  LOOM_CHECK(src.device().is_cpu() && dst.device().is_cpu(), what,
             ": gather_rows needs CPU tensors, got ", describe(src), " and ", describe(dst));
  LOOM_CHECK(src.is_contiguous() && dst.is_contiguous(), what,
             ": gather_rows needs contiguous tensors");
  LOOM_CHECK(src.dtype() == dst.dtype(), what, ": gather_rows from ", describe(src), " into ",
             describe(dst));
  LOOM_CHECK(dst.dim() >= 1 && dst.size(0) == int64_t(indices.size()), what, ": gather of ",
             indices.size(), " rows into ", describe(dst));
  const size_t rb = row_bytes(src);
  LOOM_CHECK(row_bytes(dst) == rb || indices.empty(), what, ": rows of ", describe(src),
             " do not fit rows of ", describe(dst));
  const int64_t n = src.size(0);
  const char* s = static_cast<const char*>(src.data_ptr());
  char* d = static_cast<char*>(dst.data_ptr());
  for (size_t i = 0; i < indices.size(); ++i) {
    int64_t r = indices[i];
    LOOM_CHECK(r >= 0 && r < n, what, ": index ", r, " is out of range for ", n, " examples");
    std::memcpy(d + i * rb, s + size_t(r) * rb, rb);
  }
}

// ---------------------------------------------------------------- Dataset defaults

void Dataset::gather(std::span<const int64_t>, const Tensor&, const Tensor&) const {
  LOOM_FAIL("Dataset::gather: this dataset has no spec(), so it has no batch gather; use get()");
}

Example Dataset::get_batch(std::span<const int64_t> indices) const {
  if (std::optional<ExampleSpec> sp = spec()) {
    const int64_t b = int64_t(indices.size());
    Tensor data = empty(with_batch(b, sp->data_shape), {.dtype = sp->data_dtype});
    Tensor target = sp->has_target
                        ? empty(with_batch(b, sp->target_shape), {.dtype = sp->target_dtype})
                        : Tensor();
    gather(indices, data, target);
    return {data, target};
  }
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t i : indices) examples.push_back(get(i));
  return collate(examples);
}

// ---------------------------------------------------------------- collate

Example collate(std::span<const Example> examples) {
  LOOM_CHECK(!examples.empty(), "collate: no examples to stack");
  const Example& e0 = examples[0];
  LOOM_CHECK(e0.data.defined(), "collate: example 0 has no data");
  const int64_t b = int64_t(examples.size());
  Tensor data = empty(with_batch(b, e0.data.shape()), {.dtype = e0.data.dtype()});
  Tensor target = e0.target.defined()
                      ? empty(with_batch(b, e0.target.shape()), {.dtype = e0.target.dtype()})
                      : Tensor();
  collate_into(examples, data, target);
  return {data, target};
}

void collate_into(std::span<const Example> examples, const Tensor& data, const Tensor& target) {
  LOOM_CHECK(!examples.empty(), "collate: no examples to stack");
  const Example& e0 = examples[0];
  LOOM_CHECK(e0.data.defined(), "collate: example 0 has no data");
  const bool has_target = e0.target.defined();
  const int64_t b = int64_t(examples.size());
  LOOM_CHECK(data.device().is_cpu() && data.is_contiguous() && data.dtype() == e0.data.dtype() &&
                 data.shape() == with_batch(b, e0.data.shape()),
             "collate: ", b, " examples of ", describe(e0.data), " do not fit the data buffer ",
             describe(data));
  LOOM_CHECK(target.defined() == has_target, "collate: example 0 ", (has_target ? "has" : "has no"),
             " target but the target buffer is ", (target.defined() ? "defined" : "undefined"));
  if (has_target)
    LOOM_CHECK(target.device().is_cpu() && target.is_contiguous() &&
                   target.dtype() == e0.target.dtype() &&
                   target.shape() == with_batch(b, e0.target.shape()),
               "collate: ", b, " targets of ", describe(e0.target),
               " do not fit the target buffer ", describe(target));
  char* dp = static_cast<char*>(data.data_ptr());
  char* tp = has_target ? static_cast<char*>(target.data_ptr()) : nullptr;
  const size_t db = size_t(e0.data.numel()) * e0.data.element_size();
  const size_t tb = has_target ? size_t(e0.target.numel()) * e0.target.element_size() : 0;
  for (int64_t i = 0; i < b; ++i) {
    const Example& e = examples[size_t(i)];
    LOOM_CHECK(
        e.data.defined() && e.data.shape() == e0.data.shape() && e.data.dtype() == e0.data.dtype(),
        "collate: example ", i, " has data ", e.data.defined() ? describe(e.data) : "undefined",
        ", example 0 has ", describe(e0.data), " (all examples of a batch must match)");
    LOOM_CHECK(e.data.device().is_cpu(), "collate: example ", i, " is ", describe(e.data),
               "; datasets must return CPU tensors");
    LOOM_CHECK(e.target.defined() == has_target, "collate: example ", i,
               (has_target ? " has no" : " has a"), " target, example 0 ",
               (has_target ? "has one" : "has none"));
    Tensor d = raw::contiguous(e.data);
    std::memcpy(dp + size_t(i) * db, d.data_ptr(), db);
    if (has_target) {
      LOOM_CHECK(e.target.shape() == e0.target.shape() && e.target.dtype() == e0.target.dtype() &&
                     e.target.device().is_cpu(),
                 "collate: example ", i, " has target ", describe(e.target), ", example 0 has ",
                 describe(e0.target));
      Tensor t = raw::contiguous(e.target);
      std::memcpy(tp + size_t(i) * tb, t.data_ptr(), tb);
    }
  }
}

// ---------------------------------------------------------------- TensorDataset

TensorDataset::TensorDataset(Tensor data, Tensor target) {
  LOOM_CHECK(data.defined() && data.dim() >= 1,
             "TensorDataset: data must have a first dim that indexes examples, got ",
             data.defined() ? describe(data) : "an undefined tensor");
  if (target.defined()) {
    LOOM_CHECK(target.dim() >= 1 && target.size(0) == data.size(0), "TensorDataset: data ",
               describe(data), " and target ", describe(target),
               " must have the same first dim (the number of examples)");
    LOOM_CHECK(target.device() == data.device(), "TensorDataset: data ", describe(data),
               " and target ", describe(target), " are on different devices");
  }
  // Detached contiguous copies (views when already contiguous): a dataset holds values, not graphs.
  data_ = raw::contiguous(data.detach());
  if (target.defined()) target_ = raw::contiguous(target.detach());
}

Example TensorDataset::get(int64_t index) const {
  LOOM_CHECK(index >= 0 && index < size(), "TensorDataset::get: index ", index,
             " is out of range for ", size(), " examples");
  return {raw::select(data_, 0, index),
          target_.defined() ? raw::select(target_, 0, index) : Tensor()};
}

std::optional<ExampleSpec> TensorDataset::spec() const {
  ExampleSpec s;
  s.data_shape = Shape(data_.shape().begin() + 1, data_.shape().end());
  s.data_dtype = data_.dtype();
  s.has_target = target_.defined();
  if (s.has_target) {
    s.target_shape = Shape(target_.shape().begin() + 1, target_.shape().end());
    s.target_dtype = target_.dtype();
  }
  return s;
}

void TensorDataset::gather(std::span<const int64_t> indices, const Tensor& data,
                           const Tensor& target) const {
  gather_rows("TensorDataset::gather (data)", data_, indices, data);
  if (target_.defined()) gather_rows("TensorDataset::gather (target)", target_, indices, target);
}

Example TensorDataset::get_batch(std::span<const int64_t> indices) const {
  if (data_.device().is_cpu()) return Dataset::get_batch(indices);
  // On a GPU: one index_select per tensor on the whole tensor; only the indices cross the bus.
  for (int64_t r : indices)
    LOOM_CHECK(r >= 0 && r < size(), "TensorDataset::get_batch: index ", r, " is out of range for ",
               size(), " examples");
  autograd::NoGradGuard no_grad;
  Tensor idx = to(
      from_vector(std::vector<int64_t>(indices.begin(), indices.end()), {int64_t(indices.size())}),
      data_.device());
  return {index_select(data_, 0, idx),
          target_.defined() ? index_select(target_, 0, idx) : Tensor()};
}

}  // namespace loom::data
