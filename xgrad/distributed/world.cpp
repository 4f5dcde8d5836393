#include "world.hpp"

#include <xgrad/distributed/distributed.hpp>

namespace xgrad::distributed {

MPIWorld::MPIWorld() {
  if (!is_initialized()) {
    init_process_group();
    owns_group_ = true;
  }
  rank_ = get_rank();
  size_ = get_world_size();
}

MPIWorld::~MPIWorld() {
  if (owns_group_) destroy_process_group();
}

void MPIWorld::barrier() {
  if (size_ > 1) xgrad::distributed::barrier();
}

void MPIWorld::all_reduce_sum(double* values, std::size_t count) {
  if (size_ > 1) all_reduce(values, count, ReduceOp::SUM);
}

std::vector<std::string> MPIWorld::all_gather_string(const std::string& text) {
  return xgrad::distributed::all_gather_string(text);
}

std::string MPIWorld::broadcast_string(const std::string& text, int src) {
  return xgrad::distributed::broadcast_string(text, src);
}

void MPIWorld::abort(const std::string& message, int status) { xgrad::distributed::abort(message, status); }

std::unique_ptr<xgrad::train::World> make_world() {
  if (xgrad::train::launched_world_size() > 1) return std::make_unique<MPIWorld>();
  return std::make_unique<xgrad::train::World>();
}

}  // namespace xgrad::distributed
