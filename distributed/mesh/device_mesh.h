// DeviceMesh: the world's ranks laid out as a grid with named dimensions ({"dp", 2}, {"tp", 2}),
// this rank's coordinate along each, and one process group per dimension: the ranks that differ
// from this one along that dimension only (torch.distributed.DeviceMesh; Megatron-LM's
// parallel_state). Leaves out: what each dimension is used for (tensor_parallel/, ddp/, fsdp/).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "distributed/process_group/process_group.h"

namespace loom::distributed {

// Note [Mesh layout]
// The dimensions are listed outermost first and the last varies fastest: a rank's world number is
// sum_i coordinate_i * stride_i with row-major strides, as torch's init_device_mesh lays them out.
// A training mesh is {pp, dp, tp}: the tensor-parallel ranks, which talk in every layer, are
// neighbours (one node, NVLink); data-parallel ranks talk once a step; pipeline stages least.
// On 8 ranks as {pp 2, dp 2, tp 2}: rank 5 is (pp 1, dp 0, tp 1); its tp group is {4, 5}, its dp
// group {5, 7}, its pp group {1, 5}.
struct MeshDim {
  std::string name;
  int size = 1;
};

// The world ranks of every group along dimension `dim` of a mesh of these sizes (outermost first),
// each group in increasing rank order, the groups in increasing order of their first rank: the
// order in which every process calls new_group. A pure function (tests call it alone).
std::vector<std::vector<int>> mesh_groups(const std::vector<int>& sizes, size_t dim);

class DeviceMesh {
 public:
  // Makes each dimension's groups; `new_group` makes a group of world ranks as distributed::
  // new_group does (members get it, others null) and is called for every group of every
  // dimension in the same order on every process. Errors name the mesh and the world size when
  // the sizes do not multiply out to it, and a dimension named twice or of size < 1.
  using GroupMaker = std::function<std::shared_ptr<ProcessGroup>(const std::vector<int>&)>;
  DeviceMesh(std::vector<MeshDim> dims, int rank, int world_size, const GroupMaker& new_group);
  // Over the job's world (distributed/world.h): every process calls it, with the same dims.
  explicit DeviceMesh(std::vector<MeshDim> dims);

  const std::vector<MeshDim>& dims() const { return dims_; }
  int rank() const { return rank_; }  // in the world
  int world_size() const;             // the product of the sizes
  bool has(std::string_view dim) const;
  // A dimension's size and this rank's coordinate along it: 1 and 0 for a dimension the mesh does
  // not have (a model that is not pipelined is a mesh without "pp").
  int size(std::string_view dim) const;
  int coordinate(std::string_view dim) const;
  // This rank's group along `dim`: an error naming the mesh when it has no such dimension.
  std::shared_ptr<ProcessGroup> group(std::string_view dim) const;
  // A second group of the same members along `dim`, with a communicator (and under NCCL a stream)
  // of its own: a pipeline's gradients travel back on it while its activations go forward on
  // group(dim) (Note [Two groups for a pipeline's messages] in distributed/pipeline/schedule.h).
  // Every process calls it with the same dim, as it made the mesh.
  std::shared_ptr<ProcessGroup> another_group(std::string_view dim) const;
  std::string describe() const;  // "pp 2 x dp 2 x tp 2"

 private:
  int index(std::string_view dim) const;  // -1 when absent
  std::shared_ptr<ProcessGroup> make_groups(size_t i) const;

  std::vector<MeshDim> dims_;
  int rank_ = 0;
  std::vector<int> coords_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  GroupMaker new_group_;  // kept for another_group
};

// The mesh of a training program's flags (--tp, --pp): {pp, dp, tp} with dp = world / (tp pp);
// an error naming the world size, tp and pp when they do not divide it.
std::vector<MeshDim> training_mesh_dims(int world_size, int tp, int pp);

}  // namespace loom::distributed
