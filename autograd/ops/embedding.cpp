// embedding: the forward gathers rows with Backend::index_select on the flattened ids, the
// backward adds the output gradient into the rows with Backend::embedding_backward, which sums
// repeated ids in a fixed order (Note [Deterministic embedding backward] in
// kernels/cpu/cpu_index.cpp) instead of index_add's atomics.
// Leaves out: the ids' own gradient (there is none) and autocast (the lookup runs in the table's
// dtype, as torch.nn.functional.embedding under autocast).
#include "autograd/ops/embedding.h"

#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "kernels/raw_ops.h"

namespace loom {

namespace {

// On the CPU every id is read here and checked against V; a CUDA kernel checks its own.
void check_ids_in_range(const Tensor& flat, int64_t V) {
  if (!flat.device().is_cpu()) return;
  const int64_t* p = flat.data<int64_t>();
  for (int64_t k = 0; k < flat.numel(); ++k)
    LOOM_CHECK(p[k] >= 0 && p[k] < V, "embedding: id ", p[k], " (position ", k,
               " of the flattened ids) is out of range for a weight of ", V, " rows [0, ", V, ")");
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  detail::check_defined("embedding", weight, "weight");
  detail::check_defined("embedding", ids, "ids");
  LOOM_CHECK(weight.dim() == 2, "embedding: weight must be 2-d (V, D), got ", describe(weight));
  LOOM_CHECK(weight.is_floating_point(), "embedding: weight must be floating, got ",
             describe(weight));
  LOOM_CHECK(ids.dtype() == DType::I64, "embedding: ids must be int64 (token indices), got ",
             describe(ids), " (convert with to(kI64))");
  LOOM_CHECK(ids.device() == weight.device(), "embedding: ids ", describe(ids),
             " are not on the weight's device (weight ", describe(weight), ")");
  const int64_t V = weight.size(0), D = weight.size(1), N = ids.numel();
  // ids: S -> (N), contiguous (a view of the caller's ids when they already are).
  Tensor flat = raw::view(raw::contiguous(ids), {N});
  check_ids_in_range(flat, V);
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor rows = backend_for(weight.device()).index_select(weight, 0, flat);  // (N, D)
  Tensor out = raw::view(rows, out_shape);
  return record("embedding", out, {weight},
                [sid = save(flat, "embedding"), V, N, D](const Tensor& g) {
                  // g: S + (D) -> (N, D)
                  Tensor g2 = raw::view(raw::contiguous(g), {N, D});
                  return Grads{backend_for(g.device()).embedding_backward(g2, sid.get(), V)};
                });
}

}  // namespace loom
