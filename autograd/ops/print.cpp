// Printing tensors, PyTorch-style: nested brackets, summarised with "..." past 1000 elements,
// then the dtype, shape, device and whether it requires grad.
#include <iomanip>
#include <sstream>

#include "autograd/ops/ops.h"

namespace loom {

namespace {

void print_values(std::ostream& os, const std::vector<double>& v, const Shape& shape,
                  const Strides& st, int64_t dim, int64_t offset, bool integral, bool summarise,
                  int indent) {
  const int64_t edge = 3;
  if (shape.empty()) {
    os << v[offset];
    return;
  }
  os << '[';
  int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * edge && i == edge) {
      os << "...";
      i = n - edge - 1;
      os << (dim + 1 == int64_t(shape.size()) ? ", " : ",\n" + std::string(indent + 1, ' '));
      continue;
    }
    if (dim + 1 == int64_t(shape.size())) {
      double x = v[offset + i * st[dim]];
      if (integral)
        os << int64_t(x);
      else
        os << std::setw(10) << std::setprecision(4) << x;
    } else {
      print_values(os, v, shape, st, dim + 1, offset + i * st[dim], integral, summarise,
                   indent + 1);
    }
    if (i + 1 < n)
      os << (dim + 1 == int64_t(shape.size()) ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  std::vector<double> v = t.to_vector<double>();
  std::ostringstream body;
  body << std::fixed;
  bool integral = !t.is_floating_point();
  print_values(body, v, t.shape(), contiguous_strides(t.shape()), 0, 0, integral, t.numel() > 1000,
               7);
  os << "tensor(" << body.str() << ", " << describe(t);
  if (t.requires_grad()) os << ", requires_grad";
  return os << ')';
}

}  // namespace loom
