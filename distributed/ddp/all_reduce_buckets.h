// AllReduceBuckets: DDP's bucket reduction. Each bucket is scaled by 1/N and SUM-all-reduced, so
// every rank ends with the whole mean gradient in the bucket, which the parameters' .grad view
// (Note [Gradients as bucket views] in distributed/ddp/bucket_reduction.h); with a communication
// dtype the all-reduce runs on a rounded copy (bf16 or f16) that is copied back. Leaves out: the
// hooks and launch order (distributed/ddp/reducer.h) and ZeRO's reduce-scatter
// (distributed/ddp/sharded_reduce_buckets.h).
#pragma once

#include <optional>
#include <vector>

#include "distributed/ddp/bucket_reduction.h"

namespace loom::distributed {

class AllReduceBuckets : public BucketReduction {
 public:
  // comm_dtype: when set and not a bucket's own dtype, that bucket is all-reduced in it.
  AllReduceBuckets(ProcessGroup& pg, std::optional<DType> comm_dtype)
      : BucketReduction(pg), comm_dtype_(comm_dtype) {}

  std::vector<Bucket> allocate(const std::vector<Tensor>& params,
                               const std::vector<std::vector<size_t>>& assignment) override;
  void launch(Bucket& b) override;
  void finish(Bucket& b) override;
  void shadow(std::vector<Bucket>& buckets) override;

 private:
  std::optional<DType> comm_dtype_;
};

}  // namespace loom::distributed
