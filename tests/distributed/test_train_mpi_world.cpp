// xgrad::train::MPIWorld (xgrad/train/mpi_world.hpp, library xgrad::train_mpi): the Trainer's World
// over the process group, under `mpirun -np 2` (and as a world of 1 without mpirun). It lives with
// the Trainer, above xgrad::distributed, which links no training code (docs/design.md, "Floors").
#include <xgrad/distributed/launcher.hpp>
#include <xgrad/train/mpi_world.hpp>

#include "dist_util.hpp"

using namespace xgrad::testing;

TEST(TrainMPIWorld, MakeWorldFollowsTheLauncher) {
  const std::unique_ptr<xgrad::train::World> w = xgrad::train::make_world();
  EXPECT_EQ(xgrad::distributed::launched_world_size(), world());
  EXPECT_EQ(xgrad::train::launched_world_size(), world());
  EXPECT_EQ(w->size(), world());
  EXPECT_EQ(w->rank(), world() > 1 ? rank() : 0);
  // Under mpirun -np 2 the world is an MPIWorld; a plain run gets the world of one process.
  EXPECT_EQ(dynamic_cast<xgrad::train::MPIWorld*>(w.get()) != nullptr, world() > 1);
}

TEST(TrainMPIWorld, Collectives) {
  xgrad::train::MPIWorld w;  // the group is mpi_main's: the world leaves it open when destroyed
  ASSERT_EQ(w.size(), world());
  ASSERT_EQ(w.rank(), rank());
  EXPECT_EQ(w.is_main(), rank() == 0);
  double v[2] = {1.0 + rank(), -0.5};
  w.all_reduce_sum(v, 2);
  const double n = world();
  EXPECT_EQ(v[0], n * (n + 1) / 2);
  EXPECT_EQ(v[1], -0.5 * n);
  std::vector<std::string> expected;
  for (int r = 0; r < world(); ++r) expected.push_back("rank " + std::to_string(r));
  EXPECT_EQ(w.all_gather_string("rank " + std::to_string(rank())), expected);
  EXPECT_EQ(w.broadcast_string("from " + std::to_string(rank()), world() - 1), "from " + std::to_string(world() - 1));
  w.barrier();
  EXPECT_TRUE(xgrad::distributed::is_initialized());
}
