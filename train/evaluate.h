// Evaluation of a classifier over a test set sharded across the job's processes: the mean
// cross-entropy and the accuracy over every test example, the same numbers on every rank. A
// language model is a classifier of each position's next token: its validation loss is the mean
// over every token, its accuracy that of the most likely next token.
// Leaves out: autocast (the test set is evaluated in float32) and other losses.
#pragma once

#include "data/dataloader.h"
#include "distributed/process_group.h"
#include "nn/module.h"

namespace loom::train {

// Note [Sharded evaluation]
// The test sampler gives every test example to exactly one rank (DistributedSampler with
// exactly_once: no padding, so ranks may hold one example more or less). Each rank sums its loss
// and correct answers on the device, the three sums (loss, correct, count) are all-reduced once
// and read back once, and the means are taken over the whole test set: the result does not
// depend on the number of processes.
struct Evaluation {
  double loss = 0;      // mean cross-entropy per test example (per token for a sequence model)
  double accuracy = 0;  // fraction in [0, 1]
  double seconds = 0;   // wall time of the evaluation
};

// Runs `model` in eval mode (then back to train mode) without gradients over `loader`'s batches:
// data (N, ...) -> logits (N, classes), target (N) class indices; or logits (N, T, classes),
// target (N, T) (train::classification_loss).
Evaluation evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device device);

}  // namespace loom::train
