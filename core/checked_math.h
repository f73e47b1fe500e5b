// Element and byte counts of shapes about to become tensors, checked for overflow: the one place
// factories and views ask before they allocate or make a view. Leaves out: the unchecked numel()
// of existing tensors (core/shape.h), whose shapes passed through here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/shape.h"

namespace loom {

// The product of the sizes: an Error naming `op` and the shape when a size is negative or the
// element count overflows int64.
int64_t checked_numel(const char* op, const Shape& s);

// checked_numel(op, s) * element_size: an Error naming `op`, the shape and the element size when
// the byte count overflows int64 (so it also fits size_t and every pointer offset).
int64_t checked_nbytes(const char* op, const Shape& s, size_t element_size);

}  // namespace loom
