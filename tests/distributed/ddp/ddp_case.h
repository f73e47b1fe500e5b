// The small training problem the DDP tests share: a 3-layer MLP on random data, the global batch
// of each step, and one SGD step. ddp_tool runs it on N ranks (each on its rows of the global
// batch); test_ddp.cpp runs it in one process on the whole batch as the reference. Also a small
// convolutional model with a BatchNorm2d (buffers) and each rank's own batches of it.
// Leaves out: real data (the examples' tests cover Fashion-MNIST).
#pragma once

#include <memory>
#include <utility>

#include "autograd/ops/ops.h"
#include "nn/layers.h"
#include "nn/optim/sgd.h"

namespace loom::test {

constexpr int64_t kIn = 8, kClasses = 4;

// Linear(8,32) ReLU Linear(32,32) ReLU Linear(32,4), initialised from `seed`.
inline std::shared_ptr<nn::Sequential> ddp_case_model(DType dtype, uint64_t seed) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(kIn, 32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, 32), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(32, kClasses));
  m->to(dtype);
  return m;
}

// Step s's global batch of `rows` rows: x (rows, 8), y (rows) in 0..3, the same on every rank.
inline std::pair<Tensor, Tensor> ddp_case_batch(int64_t step, int64_t rows, DType dtype) {
  Generator g(1000 + uint64_t(step));
  Tensor x = randn({rows, kIn}, {.dtype = dtype}, &g);
  Tensor y = randint(0, kClasses, {rows}, {.dtype = DType::I64}, &g);
  return {x, y};
}

// Conv2d(2,3,3) BatchNorm2d(3) ReLU Flatten Linear(12,4) on (N, 2, 4, 4): running_mean,
// running_var (float32) and num_batches_tracked (int64) are its buffers.
inline std::shared_ptr<nn::Sequential> ddp_bn_model(uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<nn::Sequential>(
      std::make_shared<nn::Conv2d>(2, 3, 3), std::make_shared<nn::BatchNorm2d>(3),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(12, kClasses));
}

// Rank r's own batch at step s: 4 images (2, 4, 4) drawn with mean r and spread 1 + r, so each
// rank's batch statistics differ; rank -1 is the evaluation batch every rank shares.
inline std::pair<Tensor, Tensor> ddp_bn_batch(int64_t step, int rank) {
  Generator g(2000 + uint64_t(step) * 16 + uint64_t(rank + 1));
  double spread = rank < 0 ? 1.0 : 1.0 + rank, mean = rank < 0 ? 0.5 : double(rank);
  Tensor x = randn({4, 2, 4, 4}, {}, &g) * spread + mean;
  Tensor y = randint(0, kClasses, {4}, {.dtype = DType::I64}, &g);
  return {x, y};
}

inline std::unique_ptr<optim::SGD> ddp_case_optimizer(nn::Module& m) {
  return std::make_unique<optim::SGD>(m.parameters(),
                                      optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

}  // namespace loom::test
