#include <xgrad/train/mpi_world.hpp>

#include <xgrad/distributed/distributed.hpp>

namespace xgrad::train {

namespace dist = xgrad::distributed;

MPIWorld::MPIWorld() {
  if (!dist::is_initialized()) {
    dist::init_process_group();
    owns_group_ = true;
  }
  rank_ = dist::get_rank();
  size_ = dist::get_world_size();
}

MPIWorld::~MPIWorld() {
  if (owns_group_) dist::destroy_process_group();
}

void MPIWorld::barrier() {
  if (size_ > 1) dist::barrier();
}

void MPIWorld::all_reduce_sum(double* values, std::size_t count) {
  if (size_ > 1) dist::all_reduce(values, count, dist::ReduceOp::SUM);
}

std::vector<std::string> MPIWorld::all_gather_string(const std::string& text) { return dist::all_gather_string(text); }

std::string MPIWorld::broadcast_string(const std::string& text, int src) { return dist::broadcast_string(text, src); }

void MPIWorld::abort(const std::string& message, int status) { dist::abort(message, status); }

std::unique_ptr<World> make_world() {
  if (launched_world_size() > 1) return std::make_unique<MPIWorld>();
  return std::make_unique<World>();
}

}  // namespace xgrad::train
