// xgrad::train::MPIWorld: the Trainer's World over Open MPI (xgrad::distributed's process group),
// for a Trainer that trains data-parallel under `mpirun -np N`. Library xgrad::train_mpi, built
// only with MPI (XGRAD_WITH_MPI); it links xgrad::train and xgrad::distributed, so that neither of
// them depends on the other (the collectives and DDP know nothing of training).
//
//   int main(int argc, char** argv) {
//     auto world = xgrad::train::make_world();  // MPI under mpirun -np N > 1, else one process
//     return xgrad::train::guarded("my_program", [&] { ... Trainer(..., *world) ... }, *world);
//   }
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <xgrad/train/world.hpp>

namespace xgrad::train {

class MPIWorld : public World {
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
// process (launched_world_size() > 1), else the world of one process without MPI (a plain run, or
// mpirun -np 1).
std::unique_ptr<World> make_world();

}  // namespace xgrad::train

// The names of before (xgrad/distributed/world.hpp), for programs written against them.
namespace xgrad::distributed {
using xgrad::train::make_world;
using xgrad::train::MPIWorld;
}  // namespace xgrad::distributed
