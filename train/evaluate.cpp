// Sharded classifier evaluation. See evaluate.h.
#include "train/evaluate.h"

#include <functional>
#include <vector>

#include "autograd/ops/ops.h"
#include "train/classification_loss.h"
#include "train/progress.h"

namespace loom::train {

namespace {
// Under ZeRO-3 each forward gathers parameters (collectives), so every rank must run as many:
// a rank with fewer test batches (Note [Sharded evaluation]: no padding) repeats its last one,
// uncounted, until it has run as many as the rank with the most (through `forward`: a
// pipeline's is its forward-only pass over the stages).
void keep_in_step(const std::function<Tensor(const Tensor&)>& forward,
                  distributed::ProcessGroup& pg, int64_t batches, const Tensor& last, Device dev) {
  if (pg.size() == 1) return;
  Tensor most = full({1}, double(batches), {.dtype = DType::I64, .device = dev});
  pg.all_reduce(most, distributed::ReduceOp::Max)->wait();
  const int64_t extra = int64_t(most.item()) - batches;
  LOOM_CHECK(extra == 0 || last.defined(),
             "evaluate_classifier: this rank has no test batch "
             "while others have ",
             extra,
             " (ZeRO-3 needs every rank to run as many forwards: "
             "use a smaller --batch-size or fewer processes)");
  for (int64_t i = 0; i < extra; ++i) (void)forward(last);
}
}  // namespace

namespace {

// The loop of both overloads: `forward` gives a batch's logits, or an undefined tensor on a rank
// whose answers another rank counts (a pipeline's stages before the last); `model` is put in eval
// mode around it.
Evaluation evaluate(nn::Module& model, const std::function<Tensor(const Tensor&)>& forward,
                    data::DataLoader& loader, distributed::ProcessGroup& pg, Device dev,
                    bool forwards_are_collectives) {
  double start = steady_seconds();
  NoGradGuard no_grad;
  model.eval();
  Tensor loss_sum = zeros({1}, {.dtype = kF64, .device = dev}),
         correct = zeros({1}, {.dtype = kF64, .device = dev});
  int64_t n = 0, batches = 0;
  Tensor last;  // a batch to run again, uncounted, while other ranks still evaluate (ZeRO-3)
  for (auto& b : loader) {
    Tensor logits = forward(b.data);  // (N, classes), or (N, T, classes) against target (N, T)
    ++batches, last = b.data;
    if (!logits.defined()) continue;  // counted on another rank
    loss_sum = loss_sum + classification_loss(logits, b.target, Reduction::Sum).to(kF64);
    correct = correct + eq(argmax(logits, -1), b.target).to(kF64).sum();
    n += b.target.numel();
  }
  if (forwards_are_collectives) keep_in_step(forward, pg, batches, last, dev);
  model.train();
  // (3): loss sum, correct answers, examples; summed over ranks (Note [Sharded evaluation]).
  Tensor sums = cat({loss_sum, correct, full({1}, double(n), {.dtype = kF64, .device = dev})}, 0);
  if (pg.size() > 1) pg.all_reduce(sums, distributed::ReduceOp::Sum)->wait();
  std::vector<double> h = sums.to(kCPU).to_vector<double>();
  return {h[0] / h[2], h[1] / h[2], steady_seconds() - start};
}

}  // namespace

Evaluation evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device dev,
                               bool forwards_are_collectives) {
  return evaluate(
      model, [&model](const Tensor& x) { return model(x); }, loader, pg, dev,
      forwards_are_collectives);
}

Evaluation evaluate_classifier(distributed::ParallelModel& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device dev) {
  return evaluate(
      model.eval_module(), [&model](const Tensor& x) { return model.eval_forward(x); }, loader, pg,
      dev, model.eval_forwards_are_collectives());
}

Evaluation evaluate_classifier(distributed::ParallelModel& model, data::DataLoader& loader,
                               const RunSetup& setup) {
  return evaluate_classifier(model, loader, *setup.pg, setup.device);
}

}  // namespace loom::train
