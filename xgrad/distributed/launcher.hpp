// xgrad::distributed::launched_world_size(): how many processes the launcher started, read from the
// environment Open MPI's mpirun gives each process (OMPI_COMM_WORLD_SIZE). Header-only and without
// MPI, so that a program built without MPI (XGRAD_WITH_MPI off) can still tell that mpirun started
// several copies of it (the xgrad::train::Trainer's constructor refuses such a run).
#pragma once

#include <algorithm>
#include <cstdlib>

namespace xgrad::distributed {

// The number of processes mpirun started (OMPI_COMM_WORLD_SIZE); 1 when the program was not
// started by mpirun.
inline int launched_world_size() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  return v != nullptr ? std::max(1, std::atoi(v)) : 1;
}

}  // namespace xgrad::distributed
