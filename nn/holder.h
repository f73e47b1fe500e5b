// ModuleHolder<M> and nn::make<M>(...): modules without std::make_shared at every call site. A
// holder is a std::shared_ptr<M> (modules are shared, never copied: Note [Modules hold their
// tensors by pointer]) that is also callable like the module: model(x), loss(logits, target).
//
//   auto model = nn::make<nn::Sequential>(nn::make<nn::Linear>(4, 16), nn::make<nn::ReLU>(),
//                                         nn::make<nn::Linear>(16, 1));
//   Tensor y = model(x);                         // model->forward(x)
//   nn::ModuleHolder<nn::Linear> fc = register_module("fc", nn::make<nn::Linear>(8, 2));
//
// Leaves out: libtorch's separate FooImpl/Foo class pairs (the layers keep their own names) and
// empty holders that are filled later (a default-constructed holder is null, as a shared_ptr).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "nn/module.h"

namespace loom::nn {

template <typename M>
class ModuleHolder : public std::shared_ptr<M> {
  static_assert(std::is_base_of_v<Module, M>, "ModuleHolder: M must derive from nn::Module");

 public:
  ModuleHolder() = default;                                                 // null
  ModuleHolder(std::shared_ptr<M> m) : std::shared_ptr<M>(std::move(m)) {}  // NOLINT: implicit
  // From a holder or pointer of a derived module (ModuleHolder<Module> of a Linear).
  template <typename D,
            typename = std::enable_if_t<std::is_base_of_v<M, D> && !std::is_same_v<M, D>>>
  ModuleHolder(std::shared_ptr<D> m) : std::shared_ptr<M>(std::move(m)) {}  // NOLINT: implicit

  // Calls the module: forward(x) for one input, the module's own operator() otherwise (losses).
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    LOOM_CHECK(this->get() != nullptr, "ModuleHolder: calling an empty holder (no module)");
    return (*this->get())(std::forward<Args>(args)...);
  }
};

// Builds an M in a holder: nn::make<nn::Linear>(784, 10), nn::make<nn::LayerNorm>(64).
template <typename M, typename... Args>
ModuleHolder<M> make(Args&&... args) {
  return ModuleHolder<M>(std::make_shared<M>(std::forward<Args>(args)...));
}

}  // namespace loom::nn
