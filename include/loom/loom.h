// loom in one header, for programs: tensors and their ops (with autograd), nn modules, losses,
// init, optimizers and schedulers, data loading, safetensors files and checkpoints, and the
// process groups and DistributedDataParallel of many-process training.
//
//   #include <loom/loom.h>
//   using namespace loom;
//   auto model = nn::Sequential(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 1));
//   optim::Adam opt(model->parameters(), {.lr = 1e-2});
//
// The finer headers stay available (<loom/nn/layers.h>, <loom/data/dataloader.h>, ...) for
// programs that want less. Leaves out: loom's internals (kernels/, the CUDA runtime's own
// headers, which need the CUDA toolkit's) and the training-loop helpers of train/.
#pragma once

// Tensors, ops, autograd.
#include "autograd/ops/ops.h"
#include "core/cuda/available.h"
#include "core/generator.h"
#include "core/out_of_memory.h"
#include "core/tensor.h"
// Modules, fusion (nn::fuse), losses, initialisation, clipping, the reference models.
#include "nn/clip.h"
#include "nn/fuse.h"
#include "nn/fused.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/models.h"
#include "nn/module.h"
// Optimizers and learning-rate schedules.
#include "nn/optim/adam.h"
#include "nn/optim/lr_scheduler.h"
#include "nn/optim/sgd.h"
// Serialization: safetensors files of named tensors, state dicts, checkpoints.
#include "core/safetensors.h"
#include "nn/checkpoint.h"
#include "nn/serialize.h"
#include "nn/state_dict.h"
// Data: datasets, samplers, transforms, the loader, (Fashion-)MNIST, tokenizers, BERT's batches.
#include "data/bpe_tokenizer.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/mlm.h"
#include "data/mlm_examples.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/tokenizer.h"
#include "data/transforms.h"
#include "data/wordpiece.h"
// Many processes: the job's environment, process groups, DistributedDataParallel.
#include "distributed/ddp/ddp.h"
#include "distributed/env.h"
#include "distributed/process_group/process_group.h"
#include "distributed/world.h"
