// xgrad::distributed::MPIWorld: xgrad::train::World over Open MPI, for a Trainer that trains
// data-parallel under `mpirun -np N` (library xgrad::distributed).
//
//   int main(int argc, char** argv) {
//     auto world = xgrad::distributed::make_world();  // MPI under mpirun -np N > 1, else one process
//     return xgrad::train::guarded("my_program", [&] { ... Trainer(..., *world) ... }, *world);
//   }
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <xgrad/train/world.hpp>

namespace xgrad::distributed {

class MPIWorld : public xgrad::train::World {
 public:
  // Initializes the process group (init_process_group) unless it already is, and then finalizes
  // it when destroyed (destroy_process_group); a group initialized by the caller is left to it.
  MPIWorld();
  ~MPIWorld() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void barrier() override;
  void all_reduce_sum(double* values, std::size_t count) override;
  std::vector<std::string> all_gather_string(const std::string& text) override;
  std::string broadcast_string(const std::string& text, int src = 0) override;
  [[noreturn]] void abort(const std::string& message, int status) override;

 private:
  bool owns_group_ = false;
  int rank_ = 0;
  int size_ = 1;
};

// For main()'s scope: an MPIWorld when the program was started by mpirun with more than one
// process (xgrad::train::launched_world_size() > 1), else the world of one process without MPI
// (a plain run, or mpirun -np 1).
std::unique_ptr<xgrad::train::World> make_world();

}  // namespace xgrad::distributed
