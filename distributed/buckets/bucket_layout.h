// Gradient buckets, the layout DDP, ZeRO and FSDP share: which parameters share a flat buffer (the
// assignment), and the buffers themselves (flat storage, a view per parameter, an optional
// low-precision copy, ZeRO's shard). Leaves out: when buckets are launched and waited for
// (distributed/ddp/reducer.h) and who owns which shard (distributed/buckets/shard_partition.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group/work.h"

namespace loom::distributed {

// Note [Bucket assignment]
// Parameters are walked in `order` (reverse registration order at first, the order gradients
// arrived after the rebuild) and grouped by (dtype, device): each group fills its current bucket
// until it holds at least the cap (first_cap_bytes for the group's first bucket, cap_bytes after),
// then starts a new one. A parameter larger than the cap gets a bucket of its own. Buckets are
// numbered by where their first parameter comes in `order`, so bucket 0 holds the gradients that
// are ready first and launches first. The result depends only on the shapes and `order`, so every
// rank that agrees on the order gets the same buckets.
struct ParamLayout {
  int64_t numel = 0;
  DType dtype = DType::F32;
  Device device = kCPU;
};
std::vector<std::vector<size_t>> compute_bucket_assignment(const std::vector<ParamLayout>& params,
                                                           const std::vector<size_t>& order,
                                                           size_t first_cap_bytes,
                                                           size_t cap_bytes);

// One bucket: its parameters (indices into the reducer's list) laid out back to back in `flat`.
struct Bucket {
  std::vector<size_t> params;    // in bucket order
  std::vector<int64_t> offsets;  // element offset of each parameter in flat
  std::vector<Tensor> views;     // flat's slice for each parameter, in the parameter's shape
  Tensor flat;                   // (numel,) in the parameters' dtype and device
  int64_t numel = 0;             // flat's size: the parameters', padded (ZeRO)
  Tensor shard;                  // ZeRO: (numel / N,) this rank's reduced part of flat
  Tensor incoming;               // ZeRO: a reduce-scatter's output to add into shard
  Tensor comm;                   // (numel,) in the communication dtype, when compressing
  size_t pending = 0;            // gradients not yet ready in this iteration
  std::shared_ptr<Work> work;    // the reduction in flight, if launched
};

// Allocates the buckets of `assignment` for `params` (all of one dtype and device per bucket);
// comm_dtype, when set and different from a bucket's dtype, adds the low-precision copy;
// pad_to > 1 rounds each flat buffer up to a multiple of it (zeros: ZeRO's N equal shards).
std::vector<Bucket> make_buckets(const std::vector<Tensor>& params,
                                 const std::vector<std::vector<size_t>>& assignment,
                                 std::optional<DType> comm_dtype, int64_t pad_to = 1);
// (Re)allocates b.flat (zeros, b.numel) and the parameters' views into it.
void allocate_flat(Bucket& b, const std::vector<Tensor>& params);
// Bytes the buckets hold now: the flat buffers allocated, and the shards.
int64_t bucket_bytes(const std::vector<Bucket>& buckets);

}  // namespace loom::distributed
