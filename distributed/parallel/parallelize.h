// parallelize: spreads a plain model over the job's processes as a plan says, and returns it
// behind the one interface of parallel_model.h. The plan's kinds compose over a device mesh
// {pp, dp, tp}: tensor parallel splits the transformer blocks over tp ranks, pipeline parallel
// cuts the stack of blocks into stages over pp ranks, and the data-parallel copies along dp are
// kept in step by DDP, ZeRO-1/2 (DDP and a sharded optimizer), FSDP (ZeRO-3) or, for a pipeline,
// its gradients averaged or sharded (ZeRO-1/2) or each stage under FSDP (ZeRO-3; its blocks split
// over tp too: torchtitan's 3D layout). Leaves out: the vocabulary split, FSDP under the
// interleaved schedule (refused).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include "core/dtype.h"
#include "distributed/ddp/ddp.h"
#include "distributed/parallel/parallel_model.h"
#include "distributed/pipeline/schedule.h"
#include "distributed/process_group/process_group.h"

namespace loom::distributed {

struct ParallelPlan {
  int zero = 0;  // 0: DDP (nothing for one process), 1 or 2: ZeRO over DDP, 3: FSDP
  int tp = 1;    // tensor-parallel ranks; the world / tp others are data-parallel copies
  bool sequence_parallel = false;  // under tp: the norms and dropout on T/tp positions each
  int pp = 1;                      // pipeline stages (GPT or Llama cut evenly by blocks)
  PipelineSchedule pp_schedule = PipelineSchedule::OneFOneB;
  // Chunks per pp rank: 2 or more with PipelineSchedule::Interleaved (Note [Interleaved 1F1B] in
  // distributed/pipeline/interleaved_schedule.h), 1 with the others.
  int pp_virtual_stages = 1;
  // FSDP's compute dtype (Note [FSDP mixed precision]); none: the parameters' own.
  std::optional<DType> fsdp_param_dtype{};
  DDPOptions ddp{};  // bucket sizes, find_unused_parameters, ... (its zero_stage is set from zero)
};

// Makes the optimizer over the model as parallelize left it: a tensor-parallel split makes new
// tensors, so the optimizer is made after it (the program picks the parameters: all of them,
// LoRA's adapters, ...).
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(nn::Module& model)>;

// Note [Applying a plan]
// Every process calls parallelize with the same plan, after building the model with the same
// seed and moving it to its device, and before anything trains:
//   1. the mesh {pp, dp, tp} over `world` (errors name the world size, tp and pp);
//      pp > 1: the blocks split over tp when tp > 1 (sequence parallel too), the stages cut
//      (PipelineModel), the optimizer made over the whole model and remade over this stage's
//      parameters (zero 1, 2: a ZeroOptimizer over it, sharded over dp; zero 3: the stage's
//      modules, tp-split or not, under FSDP over dp and a ZeroOptimizer over its shards), the
//      other stages' parameters released; done;
//   2. tp > 1: the blocks split over the tp group (parallelize_tensor; with sequence_parallel the
//      stack runs on T/tp positions per rank);
//   3. the optimizer made by make_optimizer over what is left;
//   4. the copies along dp: nothing when the world is one process and zero is 0; DDP (zero 0),
//      DDP and ZeroOptimizer (zero 1, 2) or FSDP and ZeroOptimizer (zero 3) over the dp group;
//   5. under tp, the optimizer told that it holds a share of the model.
// The program then reads train_module(), optimizer() and the rest from what it returns.
std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<nn::Module> model,
                                           const ParallelPlan& plan,
                                           std::shared_ptr<ProcessGroup> world,
                                           const MakeOptimizer& make_optimizer);

}  // namespace loom::distributed
