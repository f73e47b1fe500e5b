// ZeRO's partition: which elements of which parameters rank r of N updates, given the buckets
// (DDP's, or FSDP's units). A pure function of the bucket layout (no process group), so every rank
// computes the same one and a test can check it alone. Leaves out: the reduction
// (distributed/ddp/reducer.h) and the optimizer over the segments
// (distributed/zero/zero_optimizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::distributed {

// Note [ZeRO partition]
// Each DDP bucket is a flat buffer of its parameters laid end to end, padded with zeros to
// N * S elements; rank r owns elements [r * S, (r + 1) * S) of every bucket. The partition
// ignores parameter boundaries: a parameter may be split between two (or more) ranks, each
// holding a segment of it. So every rank owns the same number of elements, within the padding
// (less than N per bucket): its optimizer state is 1/N of the whole, to the element, and the
// reduce-scatter that gives each rank its gradient shard needs equal chunks anyway. Every
// optimizer loom has (SGD, Adam, AdamW) updates element by element, so updating a segment equals
// updating the same elements of the whole parameter, bit for bit, given the same gradient;
// per-parameter hyper-parameters (weight decay on 2-D weights only) follow each segment's
// parameter group. The cost of ignoring boundaries: a segment is a 1-D slice, so nothing that
// needs a parameter's shape (a per-matrix norm, Shampoo) could run on it.

// One bucket as the partition sees it: its parameters' element counts in flat order, and its
// padded size (a multiple of N).
struct BucketShape {
  std::vector<int64_t> numels;
  int64_t padded = 0;
};

// A slice of one parameter that one rank owns.
struct Segment {
  size_t bucket = 0;
  size_t slot = 0;           // the parameter's position in its bucket
  int64_t param_offset = 0;  // first element, in the flattened parameter
  int64_t shard_offset = 0;  // the same element's position in the rank's shard of the bucket
  int64_t numel = 0;
};

// Rank `rank`'s segments, bucket by bucket, in flat order (none of zero length). Errors: a
// padded size that is not a multiple of `world` or smaller than the parameters.
std::vector<Segment> zero_segments(const std::vector<BucketShape>& buckets, int rank, int world);

}  // namespace loom::distributed
