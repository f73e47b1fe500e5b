// parallelize: Note [Applying a plan] in distributed/parallel/parallelize.h.
#include "distributed/parallel/parallelize.h"

#include "core/error.h"
#include "distributed/mesh/device_mesh.h"
#include "distributed/parallel/data_parallel_model.h"
#include "distributed/parallel/pipeline_model.h"
#include "distributed/parallel/tensor_parallel_model.h"
#include "distributed/tensor_parallel/sequence_parallel.h"
#include "distributed/tensor_parallel/tensor_parallel.h"

namespace loom::distributed {

namespace {

// Step 4: the copies along the data-parallel group `dp` (Note [Applying a plan]).
// `tp` (null: none): under sequence parallel FSDP and ZeRO-1/2 sum the norms' gradients over it
// before they are reduce-scattered (sequence_parallel_reduce_hook, sequence_parallel_bucket_hook);
// DDP's all-reduce leaves that sum to TensorParallelModel::finish_gradients.
std::unique_ptr<ParallelModel> data_parallel(std::shared_ptr<nn::Module> model,
                                             std::unique_ptr<optim::Optimizer> opt,
                                             const ParallelPlan& plan,
                                             std::shared_ptr<ProcessGroup> dp,
                                             std::shared_ptr<ProcessGroup> tp = nullptr) {
  if (plan.zero == 3) {
    FSDPOptions o;
    o.param_dtype = plan.fsdp_param_dtype;
    if (tp && plan.sequence_parallel) o.before_reduce = sequence_parallel_reduce_hook(*model, tp);
    return std::make_unique<FSDPModel>(std::move(model), std::move(opt), std::move(dp), o);
  }
  if (dp->size() == 1 && plan.zero == 0)
    return std::make_unique<LocalModel>(std::move(model), std::move(opt));
  DDPOptions ddp = plan.ddp;
  if (tp && plan.sequence_parallel && plan.zero > 0)
    ddp.reducer.before_reduce = sequence_parallel_bucket_hook(*model, tp);
  return std::make_unique<DDPModel>(std::move(model), std::move(opt), std::move(dp), plan.zero,
                                    ddp);
}

// The plan alone first (what no world size can fix), then against the world.
void check_plan(const ParallelPlan& plan, const ProcessGroup& world) {
  LOOM_CHECK(plan.zero >= 0 && plan.zero <= 3, "parallelize: --zero ", plan.zero,
             " is not a ZeRO stage (0, 1, 2 or 3)");
  LOOM_CHECK(plan.pp == 1 || !plan.fsdp_param_dtype, "parallelize: --pp ", plan.pp,
             " with FSDP's mixed precision (fsdp_param_dtype): under a pipeline the stages' ",
             "activations travel in the parameters' dtype; run --amp bf16 as the schedule's ",
             "autocast (no fsdp_param_dtype)");
  const bool interleaved = plan.pp_schedule == PipelineSchedule::Interleaved;
  LOOM_CHECK(!interleaved || (plan.pp >= 2 && plan.pp_virtual_stages >= 2),
             "parallelize: --pp-schedule interleaved needs --pp 2 or more and "
             "--pp-virtual-stages 2 or more (got --pp ",
             plan.pp, ", --pp-virtual-stages ", plan.pp_virtual_stages, ")");
  LOOM_CHECK(!interleaved || plan.zero < 3,
             "parallelize: --pp-schedule interleaved with --zero 3: ",
             "FSDP over a pipeline stage shards one stage per rank; use --zero 1 or 2 with the ",
             "interleaved schedule, or --pp-schedule 1f1b with --zero 3");
  LOOM_CHECK(interleaved || plan.pp_virtual_stages == 1, "parallelize: --pp-virtual-stages ",
             plan.pp_virtual_stages, " needs --pp-schedule interleaved (GPipe and 1F1B hold one ",
             "stage per rank)");
  LOOM_CHECK(!plan.sequence_parallel || plan.tp > 1,
             "parallelize: --sequence-parallel splits the sequence over the tensor-parallel ranks; "
             "it needs --tp 2 or more");
  LOOM_CHECK(plan.tp >= 1 && plan.pp >= 1 && world.size() % (plan.tp * plan.pp) == 0,
             "parallelize: --tp ", plan.tp, " x --pp ", plan.pp, " does not divide the ",
             world.size(), " processes");
}

}  // namespace

std::unique_ptr<ParallelModel> parallelize(std::shared_ptr<nn::Module> model,
                                           const ParallelPlan& plan,
                                           std::shared_ptr<ProcessGroup> world,
                                           const MakeOptimizer& make_optimizer) {
  LOOM_CHECK(model != nullptr && world != nullptr, "parallelize: a null model or process group");
  check_plan(plan, *world);
  if (plan.pp > 1) {  // tp first (the stages hold split blocks), then the cut
    DeviceMesh mesh(training_mesh_dims(world->size(), plan.tp, plan.pp));
    if (plan.tp > 1)
      parallelize_tensor(*model, mesh.group("tp"), {.sequence_parallel = plan.sequence_parallel});
    // The gradients go back on a second pp group (Note [Two groups for a pipeline's messages]).
    std::shared_ptr<ProcessGroup> gradients = mesh.another_group("pp");
    return std::make_unique<PipelineModel>(model, make_optimizer(*model), mesh.group("pp"),
                                           mesh.group("dp"), plan.pp_schedule,
                                           plan.tp > 1 ? mesh.group("tp") : nullptr, plan.zero,
                                           plan.pp_virtual_stages, std::move(gradients));
  }
  if (plan.tp == 1) return data_parallel(model, make_optimizer(*model), plan, std::move(world));
  DeviceMesh mesh(training_mesh_dims(world->size(), plan.tp, 1));
  const int split =
      parallelize_tensor(*model, mesh.group("tp"), {.sequence_parallel = plan.sequence_parallel});
  LOOM_CHECK(split > 0, "parallelize: --tp ", plan.tp, ": ", model->type_name(),
             " has no attention or MLP block to split");
  auto inner =
      data_parallel(model, make_optimizer(*model), plan, mesh.group("dp"), mesh.group("tp"));
  // ZeRO and FSDP sum the norms over tp inside backward (above); after DDP's all-reduce it waits.
  return std::make_unique<TensorParallelModel>(std::move(model), mesh.group("tp"), std::move(inner),
                                               plan.sequence_parallel,
                                               /*summed_in_backward=*/plan.zero > 0);
}

}  // namespace loom::distributed
