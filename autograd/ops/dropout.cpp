// Differentiable (inverted) dropout: the kernel draws the mask from a generator's Philox stream
// (see Note [Dropout mask] in kernels/cpu/cpu_index.cpp); backward is g * mask.
// Leaves out: alpha dropout and dropout2d (whole channels).
#include "autograd/ops/dropout.h"

#include "autograd/function.h"
#include "autograd/ops/checks.h"
#include "autograd/ops/elementwise.h"
#include "core/generator.h"

namespace loom {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  detail::check_defined("dropout", x);
  LOOM_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p, " (input ",
             describe(x), ")");
  if (!training || p == 0.0) return x;
  detail::check_floating("dropout", x);
  // One Philox counter per element (the kernel uses the block at offset + i).
  GeneratorState s = (gen ? *gen : default_generator()).reserve(uint64_t(x.numel()));
  auto [y, mask] = backend_for(x.device()).dropout(x, p, s.seed, s.offset);
  return record("dropout", y, {x}, [m = mask](const Tensor& g) { return Grads{g * m}; });
}

}  // namespace loom
