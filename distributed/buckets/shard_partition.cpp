// ZeRO's partition of the buckets into equal shards: see Note [ZeRO partition].
#include "distributed/buckets/shard_partition.h"

#include <algorithm>

#include "core/error.h"

namespace loom::distributed {

std::vector<Segment> zero_segments(const std::vector<BucketShape>& buckets, int rank, int world) {
  LOOM_CHECK(world >= 1 && rank >= 0 && rank < world, "zero_segments: rank ", rank,
             " is not in a world of ", world);
  std::vector<Segment> out;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const BucketShape& bs = buckets[b];
    int64_t total = 0;
    for (int64_t n : bs.numels) total += n;
    LOOM_CHECK(bs.padded % world == 0 && bs.padded >= total, "zero_segments: bucket ", b, " holds ",
               total, " elements padded to ", bs.padded,
               ", which is not a multiple of the world size ", world, " at least that large");
    const int64_t s = bs.padded / world, lo = rank * s, hi = lo + s;  // this rank's range
    int64_t offset = 0;  // of the parameter in the bucket
    for (size_t k = 0; k < bs.numels.size(); offset += bs.numels[k], ++k) {
      const int64_t a = std::max(lo, offset), e = std::min(hi, offset + bs.numels[k]);
      if (a >= e) continue;
      out.push_back({b, k, a - offset, a - lo, e - a});
    }
  }
  return out;
}

}  // namespace loom::distributed
