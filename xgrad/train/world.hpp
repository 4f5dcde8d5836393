// xgrad::train::World: the processes a training run is spread over, as the Trainer sees them.
//
// The base class is a world of one process (rank 0 of 1), whose collectives do nothing; it is
// what a program without MPI uses. xgrad::train::MPIWorld (xgrad/train/mpi_world.hpp, library
// xgrad::train_mpi, built with MPI only) overrides it over Open MPI, so that this library never
// links MPI.
// Every member but rank(), size() and is_main() is a collective: every rank calls it, in the same
// order (as torch.distributed's collectives).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xgrad::train {

class World {
 public:
  World() = default;
  World(const World&) = delete;
  World& operator=(const World&) = delete;
  virtual ~World() = default;

  // This process's rank in [0, size()) and the number of processes.
  virtual int rank() const { return 0; }
  virtual int size() const { return 1; }
  bool is_main() const { return rank() == 0; }  // the rank that prints and writes files

  // Returns when every rank has called it.
  virtual void barrier() {}
  // Sums values[0, count) over the ranks, in place, on every rank.
  virtual void all_reduce_sum(double* values, std::size_t count) {
    (void)values;
    (void)count;
  }
  // Every rank's `text`, by rank, on every rank.
  virtual std::vector<std::string> all_gather_string(const std::string& text) { return {text}; }
  // Rank `src`'s `text` on every rank.
  virtual std::string broadcast_string(const std::string& text, int src = 0) {
    (void)src;
    return text;
  }
  // Ends every process of the job with `status` after printing `message` (MPI_Abort), so that no
  // rank waits for a failed one. A world of one process returns without doing anything: the
  // caller prints and returns the status itself.
  virtual void abort(const std::string& message, int status) {
    (void)message;
    (void)status;
  }
};

// The world of one process, shared by every Trainer not given another.
World& single_process_world();

// The number of processes the launcher started (xgrad::distributed::launched_world_size(), which
// reads mpirun's environment); 1 when the program was not started by mpirun.
int launched_world_size();

}  // namespace xgrad::train
