// Evaluation of a classifier over a test set sharded across the job's processes: the mean
// cross-entropy and the accuracy over every test example, the same numbers on every rank. A
// language model is a classifier of each position's next token: its validation loss is the mean
// over every token, its accuracy that of the most likely next token.
// Leaves out: autocast (the test set is evaluated in float32) and other losses.
#pragma once

#include "data/dataloader.h"
#include "distributed/parallel/parallel_model.h"
#include "distributed/process_group/process_group.h"
#include "nn/module.h"
#include "train/run_setup.h"

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
// forwards_are_collectives: every forward is a collective (ZeRO-3 gathers parameters in it), so
// a rank with fewer batches repeats its last one, uncounted, until every rank has run as many.
Evaluation evaluate_classifier(nn::Module& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device device,
                               bool forwards_are_collectives = false);
// The same for a program's model as parallelize spread it: its eval_forward() (under --pp a
// forward-only pipeline whose last stage counts the answers: Note [Forward-only pipeline] in
// distributed/pipeline/schedule.h), the sums over `pg` (every rank of the job).
Evaluation evaluate_classifier(distributed::ParallelModel& model, data::DataLoader& loader,
                               distributed::ProcessGroup& pg, Device device);
// On the run's process group and device.
Evaluation evaluate_classifier(distributed::ParallelModel& model, data::DataLoader& loader,
                               const RunSetup& setup);

}  // namespace loom::train
