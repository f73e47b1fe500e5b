// The bucket assignment and allocation. See distributed/buckets/bucket_layout.h.
#include "distributed/buckets/bucket_layout.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "autograd/grad_mode.h"
#include "autograd/ops/factory.h"

namespace loom::distributed {

std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<ParamLayout>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes) {
  LOOM_CHECK(order.size() == params.size(), "compute_bucket_assignment: the order names ",
             order.size(), " parameters, there are ", params.size());
  struct Open {
    std::vector<size_t> members;
    size_t bytes = 0;
    int closed = 0;  // buckets this group has already closed
  };
  std::map<std::pair<int, std::string>, Open> groups;  // (dtype, device) -> the open bucket
  std::vector<std::vector<size_t>> out;
  std::vector<bool> seen(params.size(), false);
  for (size_t i : order) {
    LOOM_CHECK(i < params.size() && !seen[i],
               "compute_bucket_assignment: the order is not a "
               "permutation of 0..",
               params.size() - 1, " (entry ", i, ")");
    seen[i] = true;
    const ParamLayout& p = params[i];
    Open& g = groups[{int(p.dtype), p.device.str()}];
    g.members.push_back(i);
    g.bytes += size_t(p.numel) * dtype_size(p.dtype);
    if (g.bytes >= (g.closed == 0 ? first_cap_bytes : cap_bytes)) {
      out.push_back(std::move(g.members));
      g.members.clear();
      g.bytes = 0;
      ++g.closed;
    }
  }
  for (auto& [key, g] : groups)
    if (!g.members.empty()) out.push_back(std::move(g.members));
  // Number the buckets by the position of their first parameter in `order`.
  std::vector<size_t> pos(params.size());
  for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
  std::sort(out.begin(), out.end(),
            [&](const auto& a, const auto& b) { return pos[a.front()] < pos[b.front()]; });
  return out;
}

std::vector<Bucket> make_buckets(const std::vector<Tensor>& params,
                                 const std::vector<std::vector<size_t>>& assignment,
                                 std::optional<DType> comm_dtype, int64_t pad_to) {
  autograd::NoGradGuard no_grad;
  std::vector<Bucket> buckets;
  for (const auto& members : assignment) {
    Bucket b;
    b.params = members;
    const Tensor& first = params[members.front()];
    int64_t total = 0;
    for (size_t i : members) {
      const Tensor& p = params[i];
      LOOM_CHECK(p.dtype() == first.dtype() && p.device() == first.device(),
                 "make_buckets: parameter '", p.name(), "' ", describe(p),
                 " does not match its bucket's dtype and device (", describe(first), ")");
      b.offsets.push_back(total);
      total += p.numel();
    }
    b.numel = (total + pad_to - 1) / pad_to * pad_to;
    allocate_flat(b, params);
    if (comm_dtype && *comm_dtype != first.dtype())
      b.comm = zeros({b.numel}, {.dtype = *comm_dtype, .device = first.device()});
    buckets.push_back(std::move(b));
  }
  return buckets;
}

void allocate_flat(Bucket& b, const std::vector<Tensor>& params) {
  autograd::NoGradGuard no_grad;
  const Tensor& first = params[b.params.front()];
  b.flat = zeros({b.numel}, {.dtype = first.dtype(), .device = first.device()});
  b.views.clear();
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params[b.params[k]];
    b.views.push_back(make_view(b.flat, p.shape(), contiguous_strides(p.shape()),
                                b.flat.offset() + b.offsets[k]));
  }
}

int64_t bucket_bytes(const std::vector<Bucket>& buckets) {
  int64_t n = 0;
  for (const Bucket& b : buckets) {
    if (b.flat.defined()) n += int64_t(b.flat.numel() * b.flat.element_size());
    if (b.shard.defined()) n += int64_t(b.shard.numel() * b.shard.element_size());
  }
  return n;
}

}  // namespace loom::distributed
