// Sequential (children run in order, named "0", "1", ...) and Flatten, the glue between a CNN's
// feature extractor and its classifier.
// Leaves out: ModuleList/ModuleDict (a Sequential or named members cover loom's models), and
// fusion: Sequential runs what it holds; nn::fuse (nn/fuse.h) is the step that swaps fused
// modules in.
#include "autograd/ops/shape.h"
#include "nn/layers.h"

namespace loom::nn {

Flatten::Flatten(int64_t s, int64_t e) : Module("Flatten"), start_dim(s), end_dim(e) {}

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const {
  return str("start_dim=", start_dim, ", end_dim=", end_dim);
}

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
    : Module("Sequential") {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  add_child(std::to_string(size()), std::move(m));
}

void Sequential::replace(size_t i, std::shared_ptr<Module> m) {
  LOOM_CHECK(i < size(), "Sequential::replace: index ", i, " is out of range for ", size(),
             " modules");
  replace_child(std::to_string(i), std::move(m));
}

const std::shared_ptr<Module>& Sequential::operator[](size_t i) const {
  LOOM_CHECK(i < size(), "Sequential: index ", i, " is out of range for ", size(), " modules");
  return named_children()[i].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, child] : named_children()) h = (*child)(h);
  return h;
}

}  // namespace loom::nn
