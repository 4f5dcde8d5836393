#include "world.hpp"

#include <algorithm>
#include <cstdlib>

namespace xgrad::train {

World& single_process_world() {
  static World world;
  return world;
}

int launched_world_size() {
  const char* v = std::getenv("OMPI_COMM_WORLD_SIZE");
  return v != nullptr ? std::max(1, std::atoi(v)) : 1;
}

}  // namespace xgrad::train
