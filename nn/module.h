// Module: the base of every layer and model. It owns named parameters, buffers and submodules,
// and gives them back with dotted names ("features.0.weight"), saves and loads them as a
// StateDict, switches train/eval, moves them between devices and dtypes, and clears gradients.
// Also one pair of forward hooks per module (Note [Forward hooks]). Leaves out: the layers
// themselves (nn/layers.h).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/state_dict.h"

namespace loom::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict(sd, strict = false) skipped.
struct LoadResult {
  std::vector<std::string> missing_keys;     // in the module, not in sd
  std::vector<std::string> unexpected_keys;  // in sd, not in the module
};

// Note [Modules hold their tensors by pointer]
// A layer keeps its parameters as plain members (`Tensor weight;`) and registers them with
// register_parameter("weight", weight), which stores a pointer to the member. Hence modules are
// neither copied nor moved (the pointers would dangle): create them with nn::make<M>(...)
// (nn/holder.h) or std::make_shared. to() converts each registered tensor in place
// (Tensor::set_data): the member keeps its TensorImpl and takes the converted data, so every
// handle made before to() (an optimizer's, state_dict() entries aside) sees the moved
// parameters. An optimizer that already stepped keeps its state where it was; its next step is
// an error naming the parameter (nn/optim/optimizer.cpp), never a silent mix.
// Note [Forward hooks]
// A module may carry one pair of hooks that run around each call of its forward made through
// operator() or call_hooked(): `before` just before the forward, `after` on its outputs, which it
// may replace with other tensors of the same values (FSDP, distributed/fsdp/fsdp.h, gathers a
// unit's parameters before and frees them after, and replaces the outputs with identities whose
// backward gathers them again). A module whose forward returns several tensors, or that its
// parent calls through another method (TransformerBlock::forward_parts), runs that body through
// call_hooked itself, so hooks see every call. A forward called directly, bypassing both, runs
// without them.
class Module;
struct ForwardHooks {
  std::function<void(Module&)> before{};
  std::function<void(Module&, std::vector<Tensor>& outputs)> after{};
};

class Module {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // One input, one output. Modules with other signatures (losses) add their own forward.
  virtual Tensor forward(const Tensor& x);
  // The mean training loss of inputs x against class targets y (entries -1 ignored), for a model
  // that makes it better than a cross-entropy over forward(x): GPT's head and loss as one op
  // (Note [The classifier in one node] in autograd/ops/linalg.cpp). has_loss() says whether the
  // model has one (StepRunner then calls loss instead of forward); loss errors when it has not.
  virtual bool has_loss() const { return false; }
  virtual Tensor loss(const Tensor& x, const Tensor& y);
  // Calls forward(); in anomaly mode (autograd/anomaly.h) it also names this call in the scope
  // path: "<name in parent> (<type>)".
  Tensor operator()(const Tensor& x);

  const std::string& type_name() const { return type_name_; }

  // Note [Forward hooks]: installs the pair (an error when a pair is already installed: one owner
  // at a time); clear_forward_hooks removes it.
  void set_forward_hooks(ForwardHooks hooks);
  void clear_forward_hooks() { hooks_.reset(); }
  bool has_forward_hooks() const { return hooks_ != nullptr; }
  // Runs `body` (this module's forward, as the caller writes it) between the hooks.
  std::vector<Tensor> call_hooked(const std::function<std::vector<Tensor>()>& body);

  // ---- what the module holds (pre-order: own entries first, then each child's) ----
  // Parameters shared between submodules are listed once, under their first name.
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module (named "") and every descendant, with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<const Module>>> named_modules() const;

  // ---- saving and loading ----
  // Parameters and persistent buffers, detached (sharing storage), in registration order; a
  // tensor registered twice (tied weights) once, under its first name.
  StateDict state_dict() const;
  // Copies sd's tensors into this module's (converting dtype and device). Entries of the wrong
  // shape are always an error; with strict, missing and unexpected entries are too. One error
  // lists every problem by name, and nothing is loaded when there is any.
  LoadResult load_state_dict(const StateDict& sd, bool strict = true);

  // ---- modes and placement (recursive) ----
  virtual void train(bool on = true);  // overrides must call Module::train
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters, their gradients and buffers in place (each keeps its identity: handles
  // held elsewhere follow); requires_grad and names are kept.
  void to(Device d);
  // Converts floating parameters, gradients and buffers (integer buffers keep their dtype).
  void to(DType t);
  void to(Device d, DType t);
  // Clears every parameter's gradient (leaves it undefined, as set_to_none=True).
  void zero_grad();

  // Printing: "Linear(in_features=8, out_features=16, bias=true)", children indented.
  virtual std::string extra_repr() const { return ""; }
  void print(std::ostream& os, int indent = 0) const;

  // Puts m in place of the child called `name` (same name, same position in every listing). m's
  // parameters keep the names they have: nn::fuse (nn/fuse.h) swaps in modules that share the
  // replaced ones' tensors, which are already named. A member holder that points at the old
  // child (GPT::h) is the caller's to update (nn/fuse_transformer.cpp does both).
  void replace_child(const std::string& name, std::shared_ptr<Module> m);
  // Removes the child called `name` (merge_lora drops a Linear's adapters this way).
  void remove_child(const std::string& name);

 protected:
  // Registers a member tensor (see Note [Modules hold their tensors by pointer]); parameters get
  // requires_grad. Names must be unique in the module and contain no '.'.
  Tensor& register_parameter(const std::string& name, Tensor& t, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor& t, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  // A wrapper (DistributedDataParallel) lists `inner`'s own parameters, buffers and children as
  // its own, under the same names, so state_dict() is the same with or without the wrapper.
  // The wrapper must keep `inner` alive (the entries point at its members).
  void share_members_of(Module& inner);

 private:
  struct Entry {
    std::string name;
    Tensor* t;
    bool persistent = true;  // buffers only
  };
  void check_new_name(const std::string& name) const;
  // The parameters (params) or buffers, each tensor once, named from this module.
  NamedTensors collect(bool params, bool recurse) const;
  void collect(const std::string& prefix, bool params, bool recurse, NamedTensors& out,
               std::unordered_set<const TensorImpl*>& seen) const;
  void set_parameter_names(const std::string& prefix);
  void set_parameter_names(const std::string& prefix, std::unordered_set<const TensorImpl*>& seen);
  void convert(const std::function<Tensor(const Tensor&)>& f);
  Tensor forward_named(const Tensor& x);  // forward(), named in the anomaly scope path

  std::string type_name_;
  bool training_ = true;
  std::unique_ptr<ForwardHooks> hooks_;
  std::vector<Entry> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace loom::nn
