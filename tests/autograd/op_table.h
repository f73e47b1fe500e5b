// The per-op table. Each case names an op, how to make its inputs, the loom call, and a naive
// float64 reference (tests/support/reference.h). For every case the runner checks
//   1. the float64 forward against the reference,
//   2. the float32 forward against the reference (looser tolerance),
//   3. the gradients against finite differences (gradcheck, float64),
// Cases build non-contiguous and broadcast inputs inside `op` (transposes, slices, expands), so
// the kernels see every layout. Each family adds its cases in its own cases_*.cpp file.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "support/reference.h"

namespace loom::testing {

using OpFn = std::function<Tensor(const std::vector<Tensor>&)>;
using RefFn = std::function<ref::Array(const std::vector<ref::Array>&)>;

enum class Init { Normal, Positive, Int };  // randn; uniform in [0.5, 2); class indices

struct InputSpec {
  Shape shape;
  Init init = Init::Normal;
  bool grad = true;       // checked by gradcheck
  int64_t int_high = 10;  // Init::Int draws in [0, int_high)
};

struct OpCase {
  std::string name;  // unique; a gtest parameter name (letters, digits, _)
  std::vector<InputSpec> inputs;
  OpFn op;
  RefFn reference;
  double tol64 = 1e-10;  // forward, float64
  double tol32 = 1e-4;   // forward, float32 (relative to max(1, |ref|))
  bool check_grad = true;
};

std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduce_cases();
std::vector<OpCase> linalg_cases();
std::vector<OpCase> shape_cases();
std::vector<OpCase> softmax_loss_cases();
std::vector<OpCase> conv_pool_norm_cases();
std::vector<OpCase> embedding_attention_cases();
std::vector<OpCase> llama_cases();  // rms_norm, rope, swiglu, grouped-query attention

// gtest prints a case by its name.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// Makes the inputs of a case in the given floating dtype (ints stay int64), seeded by name.
std::vector<Tensor> make_inputs(const OpCase& c, DType dtype, bool requires_grad);

}  // namespace loom::testing
