// DeviceMesh (distributed/mesh/device_mesh.h): the layout arithmetic of Note [Mesh layout], the
// groups made through new_group, and the lookups. Leaves out: the groups' collectives.
#include "distributed/mesh/device_mesh.h"

#include <set>

#include "core/error.h"
#include "distributed/world.h"

namespace loom::distributed {

namespace {

std::vector<int> strides_of(const std::vector<int>& sizes) {  // row-major, last fastest
  std::vector<int> s(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) s[i - 1] = s[i] * sizes[i];
  return s;
}

std::string describe_dims(const std::vector<MeshDim>& dims) {
  std::string out;
  for (const MeshDim& d : dims)
    out += (out.empty() ? "" : " x ") + d.name + " " + std::to_string(d.size);
  return out.empty() ? "(no dimensions)" : out;
}

}  // namespace

std::vector<std::vector<int>> mesh_groups(const std::vector<int>& sizes, size_t dim) {
  LOOM_CHECK(dim < sizes.size(), "mesh_groups: dimension ", dim, " of a mesh of ", sizes.size());
  const std::vector<int> stride = strides_of(sizes);
  int world = 1;
  for (int s : sizes) world *= s;
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world; ++r) {
    if ((r / stride[dim]) % sizes[dim] != 0) continue;  // r starts a group: coordinate 0 along dim
    std::vector<int> g;
    for (int c = 0; c < sizes[dim]; ++c) g.push_back(r + c * stride[dim]);
    groups.push_back(std::move(g));
  }
  return groups;
}

DeviceMesh::DeviceMesh(std::vector<MeshDim> dims, int rank, int world_size,
                       const GroupMaker& new_group)
    : dims_(std::move(dims)), rank_(rank), new_group_(new_group) {
  std::set<std::string> names;
  std::vector<int> sizes;
  for (const MeshDim& d : dims_) {
    LOOM_CHECK(d.size >= 1, "DeviceMesh(", describe_dims(dims_), "): dimension ", d.name,
               " has size ", d.size, "; sizes must be at least 1");
    LOOM_CHECK(names.insert(d.name).second, "DeviceMesh(", describe_dims(dims_), "): dimension ",
               d.name, " is named twice");
    sizes.push_back(d.size);
  }
  LOOM_CHECK(world_size == this->world_size(), "DeviceMesh(", describe_dims(dims_),
             "): the sizes multiply to ", this->world_size(), " ranks but the world has ",
             world_size);
  LOOM_CHECK(rank >= 0 && rank < world_size, "DeviceMesh: rank ", rank, " is not in the world of ",
             world_size);
  const std::vector<int> stride = strides_of(sizes);
  for (size_t i = 0; i < dims_.size(); ++i) {
    coords_.push_back((rank / stride[i]) % sizes[i]);
    groups_.push_back(make_groups(i));
  }
}

// Every group along dimension i, made on every process in mesh_groups' order; this rank's.
std::shared_ptr<ProcessGroup> DeviceMesh::make_groups(size_t i) const {
  std::vector<int> sizes;
  for (const MeshDim& d : dims_) sizes.push_back(d.size);
  std::shared_ptr<ProcessGroup> mine;
  for (const std::vector<int>& g : mesh_groups(sizes, i)) {  // every process makes every group
    std::shared_ptr<ProcessGroup> pg = new_group_(g);
    if (pg) mine = std::move(pg);
  }
  LOOM_CHECK(mine != nullptr, "DeviceMesh(", describe_dims(dims_), "): rank ", rank_,
             " got no group along ", dims_[i].name);
  return mine;
}

DeviceMesh::DeviceMesh(std::vector<MeshDim> dims)
    : DeviceMesh(std::move(dims), world()->rank(), world()->size(),
                 [](const std::vector<int>& ranks) { return new_group(ranks); }) {}

int DeviceMesh::world_size() const {
  int n = 1;
  for (const MeshDim& d : dims_) n *= d.size;
  return n;
}

int DeviceMesh::index(std::string_view dim) const {
  for (size_t i = 0; i < dims_.size(); ++i)
    if (dims_[i].name == dim) return int(i);
  return -1;
}

bool DeviceMesh::has(std::string_view dim) const { return index(dim) >= 0; }

int DeviceMesh::size(std::string_view dim) const {
  int i = index(dim);
  return i < 0 ? 1 : dims_[i].size;
}

int DeviceMesh::coordinate(std::string_view dim) const {
  int i = index(dim);
  return i < 0 ? 0 : coords_[i];
}

std::shared_ptr<ProcessGroup> DeviceMesh::group(std::string_view dim) const {
  int i = index(dim);
  LOOM_CHECK(i >= 0, "DeviceMesh(", describe(), "): no dimension named ", dim);
  return groups_[i];
}

std::shared_ptr<ProcessGroup> DeviceMesh::another_group(std::string_view dim) const {
  int i = index(dim);
  LOOM_CHECK(i >= 0, "DeviceMesh(", describe(), ").another_group: no dimension named ", dim);
  return make_groups(size_t(i));
}

std::string DeviceMesh::describe() const { return describe_dims(dims_); }

std::vector<MeshDim> training_mesh_dims(int world_size, int tp, int pp) {
  LOOM_CHECK(tp >= 1 && pp >= 1, "--tp ", tp, " and --pp ", pp, " must be at least 1");
  LOOM_CHECK(world_size % (tp * pp) == 0, "--tp ", tp, " x --pp ", pp, " = ", tp * pp,
             " does not divide the world of ", world_size,
             " processes (data parallel takes world / (tp pp) of them)");
  return {{"pp", pp}, {"dp", world_size / (tp * pp)}, {"tp", tp}};
}

}  // namespace loom::distributed
