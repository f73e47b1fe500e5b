// Sharded classifier evaluation. See evaluate.h.
#include "train/evaluate.h"

#include <vector>

#include "autograd/ops/ops.h"
#include "train/progress.h"
#include "train/step_runner.h"

namespace loom::train {

Evaluation evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device dev) {
  double start = steady_seconds();
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum = zeros({1}, {.dtype = kF64, .device = dev}),
         correct = zeros({1}, {.dtype = kF64, .device = dev});
  int64_t n = 0;
  for (auto& b : loader) {
    Tensor logits = model(b.data);  // (N, classes), or (N, T, classes) against target (N, T)
    loss_sum = loss_sum + classification_loss(logits, b.target, Reduction::Sum).to(kF64);
    correct = correct + eq(argmax(logits, -1), b.target).to(kF64).sum();
    n += b.target.numel();
  }
  model.train();
  // (3): loss sum, correct answers, examples; summed over ranks (Note [Sharded evaluation]).
  Tensor sums = cat({loss_sum, correct, full({1}, double(n), {.dtype = kF64, .device = dev})}, 0);
  if (pg.size() > 1) pg.all_reduce(sums, distributed::ReduceOp::Sum)->wait();
  std::vector<double> h = sums.to(kCPU).to_vector<double>();
  return {h[0] / h[2], h[1] / h[2], steady_seconds() - start};
}

}  // namespace loom::train
