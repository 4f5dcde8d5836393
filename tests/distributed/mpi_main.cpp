// main() of the distributed gtest suites: the process group around RUN_ALL_TESTS. Run them with
// `mpirun -np 2` (ctest does); without mpirun they run as a world of 1. A failure on one rank
// fails mpirun's exit code; a rank left waiting in a collective is ended by the ctest TIMEOUT.
#include <gtest/gtest.h>

#include <xgrad/distributed/distributed.hpp>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  xgrad::distributed::init_process_group();
  const int result = RUN_ALL_TESTS();
  xgrad::distributed::destroy_process_group();
  return result;
}
