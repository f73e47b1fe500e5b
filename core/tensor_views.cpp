// Raw view arithmetic: every function returns a tensor sharing x's storage.
#include "core/tensor_views.h"

#include <algorithm>

#include "core/checked_math.h"

namespace loom::raw {

Shape infer_shape(const char* op, const Shape& s, int64_t n) {
  Shape out = s;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      LOOM_CHECK(infer < 0, op, ": only one dimension can be -1, got shape ", s);
      infer = int64_t(i);
    } else {
      LOOM_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in shape ", s);
      LOOM_CHECK(!__builtin_mul_overflow(known, s[i], &known), op, ": shape ", s,
                 " has more elements than int64 can count, not the ", n, " of the tensor");
    }
  }
  if (infer >= 0) {
    LOOM_CHECK(known != 0 && n % known == 0, op, ": shape ", s, " is invalid for a tensor of ", n,
               " elements");
    out[infer] = n / known;
  }
  LOOM_CHECK(checked_numel(op, out) == n, op, ": shape ", s, " is invalid for a tensor of ", n,
             " elements");
  return out;
}

std::optional<Strides> view_strides(const Shape& sizes, const Strides& strides,
                                    const Shape& target) {
  Strides out(target.size());
  if (numel(sizes) == 0 || sizes.empty()) {
    return contiguous_strides(target);
  }
  // Walk the old dims from the right, grouping them into chunks that are contiguous in memory,
  // and hand each chunk's elements to the new dims that cover exactly the same count.
  int64_t view_d = int64_t(target.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    bool chunk_ends =
        d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride);
    if (chunk_ends) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Tensor view(const Tensor& x, const Shape& s) {
  Shape target = infer_shape("view", s, x.numel());
  auto st = view_strides(x.shape(), x.strides(), target);
  LOOM_CHECK(st.has_value(), "view: cannot view ", describe(x), " with strides ", x.strides(),
             " as ", target, " without a copy (use reshape, or contiguous() first)");
  return make_view(x, target, *st, x.offset());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  LOOM_CHECK(int64_t(dims.size()) == x.dim(), "permute: got ", dims.size(), " dims ", dims,
             " for a tensor of ", x.dim(), " dims ", x.shape());
  Shape sizes(dims.size());
  Strides strides(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim("permute", dims[i], x.dim());
    LOOM_CHECK(!seen[d], "permute: dim ", d, " repeats in ", dims);
    seen[d] = true;
    sizes[i] = x.shape()[d];
    strides[i] = x.strides()[d];
  }
  return make_view(x, sizes, strides, x.offset());
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  d0 = wrap_dim("transpose", d0, x.dim());
  d1 = wrap_dim("transpose", d1, x.dim());
  Shape sizes = x.shape();
  Strides strides = x.strides();
  std::swap(sizes[d0], sizes[d1]);
  std::swap(strides[d0], strides[d1]);
  return make_view(x, sizes, strides, x.offset());
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap_dim("slice", dim, x.dim());
  LOOM_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = x.shape();
  Strides strides = x.strides();
  sizes[dim] = (end - start + step - 1) / step;
  strides[dim] *= step;
  return make_view(x, sizes, strides, x.offset() + start * x.strides()[dim]);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  dim = wrap_dim("select", dim, x.dim());
  int64_t n = x.shape()[dim];
  LOOM_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", dim,
             " of size ", n, " (shape ", x.shape(), ")");
  if (index < 0) index += n;
  Shape sizes = x.shape();
  Strides strides = x.strides();
  int64_t off = x.offset() + index * strides[dim];
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return make_view(x, sizes, strides, off);
}

Tensor expand(const Tensor& x, const Shape& s) {
  LOOM_CHECK(s.size() >= x.shape().size(), "expand: cannot expand ", x.shape(), " to fewer dims ",
             s);
  size_t off = s.size() - x.shape().size();
  Shape sizes(s.size());
  Strides strides(s.size(), 0);
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < off) {
      LOOM_CHECK(s[i] >= 0, "expand: new leading dim ", i, " cannot be ", s[i], " (target ", s,
                 ")");
      sizes[i] = s[i];
      continue;
    }
    int64_t have = x.shape()[i - off];
    int64_t want = s[i] == -1 ? have : s[i];
    LOOM_CHECK(have == want || have == 1, "expand: cannot expand ", x.shape(), " to ", s, " (dim ",
               i, ": ", have, " vs ", want, ")");
    sizes[i] = want;
    strides[i] = have == want ? x.strides()[i - off] : 0;
  }
  checked_numel("expand", sizes);
  return make_view(x, sizes, strides, x.offset());
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim("squeeze", dim, x.dim());
  if (x.dim() == 0 || x.shape()[dim] != 1) return make_view(x, x.shape(), x.strides(), x.offset());
  Shape sizes = x.shape();
  Strides strides = x.strides();
  sizes.erase(sizes.begin() + dim);
  strides.erase(strides.begin() + dim);
  return make_view(x, sizes, strides, x.offset());
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  dim = wrap_dim("unsqueeze", dim, x.dim() + 1);
  Shape sizes = x.shape();
  Strides strides = x.strides();
  int64_t st = dim < x.dim() ? sizes[dim] * strides[dim] : 1;
  sizes.insert(sizes.begin() + dim, 1);
  strides.insert(strides.begin() + dim, st);
  return make_view(x, sizes, strides, x.offset());
}

bool is_channels_last(const Tensor& x) {
  if (x.dim() != 4) return false;
  const int64_t C = x.size(1), H = x.size(2), W = x.size(3);
  return x.stride(1) == 1 && x.stride(3) == C && x.stride(2) == W * C && x.stride(0) == H * W * C;
}

Tensor empty_channels_last(const Shape& s, Options opt) {
  LOOM_CHECK(s.size() == 4, "empty_channels_last: expected a shape (N, C, H, W), got ", s);
  return permute(empty({s[0], s[2], s[3], s[1]}, opt), {0, 3, 1, 2});
}

}  // namespace loom::raw
