// DeviceMesh's layout without processes: the groups of each dimension (Note [Mesh layout]), this
// rank's coordinates and groups through a recording group maker, and the errors for meshes that
// do not fit the world. (The groups' collectives run in tests/distributed/tensor_parallel/.)
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "distributed/mesh/device_mesh.h"
#include "distributed/process_group/local_process_group.h"
#include "support/errors.h"

using namespace loom;
using namespace loom::distributed;
using loom::test::error_of;

namespace {

using Groups = std::vector<std::vector<int>>;

// Makes every group the mesh asks for; members get a one-process stand-in that remembers the
// group's world ranks (what the mesh hands out is checked through world_ranks()).
struct Recorder {
  int rank;
  Groups asked;
  std::shared_ptr<ProcessGroup> operator()(const std::vector<int>& ranks) {
    asked.push_back(ranks);
    if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) return nullptr;
    auto pg = std::make_shared<LocalProcessGroup>(std::chrono::seconds(1));
    pg->set_world_ranks(ranks);
    return pg;
  }
};

TEST(MeshGroups, EachDimensionsGroupsOfAPpDpTpMesh) {
  const std::vector<int> sizes{2, 2, 2};  // pp, dp, tp
  EXPECT_EQ(mesh_groups(sizes, 2), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh_groups(sizes, 1), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_groups(sizes, 0), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh_groups({3, 2}, 0), (Groups{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(mesh_groups({1, 4}, 0), (Groups{{0}, {1}, {2}, {3}}));
}

TEST(DeviceMesh, RankFiveOfPp2Dp2Tp2HasTheNotesCoordinatesAndGroups) {
  Recorder rec{5, {}};
  DeviceMesh mesh({{"pp", 2}, {"dp", 2}, {"tp", 2}}, 5, 8, std::ref(rec));
  EXPECT_EQ(mesh.coordinate("pp"), 1);
  EXPECT_EQ(mesh.coordinate("dp"), 0);
  EXPECT_EQ(mesh.coordinate("tp"), 1);
  EXPECT_EQ(mesh.group("tp")->world_ranks(), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.group("dp")->world_ranks(), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.group("pp")->world_ranks(), (std::vector<int>{1, 5}));
  EXPECT_EQ(rec.asked.size(), 12u);  // every group of every dimension, on every rank
  EXPECT_EQ(mesh.describe(), "pp 2 x dp 2 x tp 2");
  EXPECT_EQ(mesh.world_size(), 8);
  EXPECT_FALSE(mesh.has("sp"));
  EXPECT_EQ(mesh.size("sp"), 1);  // an absent dimension: size 1, coordinate 0
  EXPECT_EQ(mesh.coordinate("sp"), 0);
}

// another_group: every pp group made again, on every rank and in the same order (a collective
// over the world), this rank's a new group of the same members.
TEST(DeviceMesh, AnotherGroupAlongADimensionHasTheSameMembersAndIsNew) {
  Recorder rec{5, {}};
  DeviceMesh mesh({{"pp", 2}, {"dp", 2}, {"tp", 2}}, 5, 8, std::ref(rec));
  rec.asked.clear();
  std::shared_ptr<ProcessGroup> second = mesh.another_group("pp");
  EXPECT_EQ(rec.asked, mesh_groups({2, 2, 2}, 0));
  ASSERT_NE(second, nullptr);
  EXPECT_NE(second, mesh.group("pp"));
  EXPECT_EQ(second->world_ranks(), (std::vector<int>{1, 5}));
  EXPECT_NE(error_of([&] {
              mesh.another_group("sp");
            }).find("DeviceMesh(pp 2 x dp 2 x tp 2).another_group: no dimension named sp"),
            std::string::npos);
}

TEST(DeviceMesh, MeshesThatDoNotFitTheWorldAreRefusedByName) {
  Recorder rec{0, {}};
  EXPECT_NE(error_of([&] {
              DeviceMesh({{"dp", 2}, {"tp", 2}}, 0, 6, std::ref(rec));
            }).find("DeviceMesh(dp 2 x tp 2): the sizes multiply to 4 ranks but the world has 6"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DeviceMesh({{"tp", 2}, {"tp", 2}}, 0, 4, std::ref(rec));
            }).find("dimension tp is named twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              DeviceMesh({{"dp", 0}}, 0, 1, std::ref(rec));
            }).find("dimension dp has size 0"),
            std::string::npos);
  DeviceMesh mesh({{"dp", 1}}, 0, 1, std::ref(rec));
  EXPECT_NE(error_of([&] { mesh.group("tp"); }).find("DeviceMesh(dp 1): no dimension named tp"),
            std::string::npos);
}

TEST(TrainingMesh, DataParallelTakesTheRestAndAWorldItDoesNotDivideIsNamed) {
  auto dims = training_mesh_dims(8, 2, 2);
  ASSERT_EQ(dims.size(), 3u);
  EXPECT_EQ(dims[0].name, "pp");
  EXPECT_EQ(dims[1].name, "dp");
  EXPECT_EQ(dims[1].size, 2);
  EXPECT_EQ(dims[2].name, "tp");
  EXPECT_NE(error_of([] {
              training_mesh_dims(6, 4, 1);
            }).find("--tp 4 x --pp 1 = 4 does not divide the world of 6 processes"),
            std::string::npos);
}

}  // namespace
