// StateDict: the ordered list of named tensors that modules, optimizers and schedulers save and
// load ("features.0.weight", "state.3.exp_avg", "param_groups.0.lr"), ready for safetensors.
// Leaves out: files (core/safetensors, nn/checkpoint) and the loading rules of each owner.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace loom::nn {

// Entries keep the order in which they were added (registration order for modules).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// The tensor stored under `name`, or nullptr.
const Tensor* find(const StateDict& sd, const std::string& name);

// The names of sd, in order.
std::vector<std::string> names(const StateDict& sd);

// A 0-d float64 tensor holding v (hyper-parameters and counters in optimizer/scheduler states).
Tensor scalar_entry(double v);
// The value of a one-element entry; an error naming `owner` and `name` if missing or not 0-d.
double scalar_value(const StateDict& sd, const std::string& name, const char* owner);

// Joins names for error messages: "a, b, c".
std::string join_names(const std::vector<std::string>& names);

}  // namespace loom::nn
