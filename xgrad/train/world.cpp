#include "world.hpp"

#include <xgrad/distributed/launcher.hpp>

namespace xgrad::train {

World& single_process_world() {
  static World world;
  return world;
}

int launched_world_size() { return xgrad::distributed::launched_world_size(); }

}  // namespace xgrad::train
