// xgrad::distributed: processes and collectives over Open MPI, with torch.distributed's names.
// Every rank runs the same program (`mpirun -np 2 ./train`); collectives must be called by every
// rank of the world, in the same order, with tensors of the same shape (as in PyTorch).
//
//   xgrad::distributed::init_process_group();          // MPI_Init_thread; a world of 1 without mpirun
//   auto t = xgrad::full<double>({3}, rank + 1.0);
//   xgrad::distributed::all_reduce(t);                  // every rank: 1 + 2 + ... + world_size
//   xgrad::distributed::destroy_process_group();        // MPI_Finalize
//
// Built only with the CMake option XGRAD_WITH_MPI (on when Open MPI is found); link
// xgrad::distributed. XGRAD_WITH_MPI is defined for code that includes this header then.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/core/factories.hpp>

namespace xgrad::distributed {

// torch.distributed.ReduceOp. AVG is SUM divided by the world size (integer division for integers).
enum class ReduceOp { SUM, AVG, MAX };

// ---- the process group ---------------------------------------------------------------------

// Initializes MPI (MPI_Init_thread, MPI_THREAD_FUNNELED: only the thread that called it may call
// collectives) on MPI_COMM_WORLD. Without mpirun, Open MPI's singleton init makes a world of 1.
// Also installs a std::terminate handler that prints the uncaught exception with the rank and
// calls MPI_Abort, so a rank that fails ends the whole job (non-zero exit) instead of leaving the
// others hanging in a collective. Throws if already initialized.
void init_process_group();
// MPI_Finalize, and the previous terminate handler back. Does nothing when not initialized; a
// program that returns from main without calling it is finalized at exit.
void destroy_process_group();
bool is_initialized();
// MPI rank in [0, world_size) and the number of processes; throw when not initialized.
int get_rank();
int get_world_size();
void barrier();
// Ends every process of the job now (MPI_Abort), after printing `message` with the rank to stderr.
[[noreturn]] void abort(const std::string& message, int error_code = 1);

// ---- collectives on tensors (in place on the value; the graph and gradients are untouched) ------

// Every rank's t.value() becomes the reduction over ranks. Shapes must agree across ranks.
template <class T>
void all_reduce(Tensor<T>& t, ReduceOp op = ReduceOp::SUM);
// Every rank's t.value() becomes rank src's. Shapes must agree across ranks.
template <class T>
void broadcast(Tensor<T>& t, int src = 0);
// Rank r's tensor at index r, on every rank (torch's all_gather(tensor_list, tensor), returned).
// Shapes are exchanged first: a shape that differs across ranks throws on every rank (no hang).
template <class T>
std::vector<Tensor<T>> all_gather(const Tensor<T>& t);

// ---- raw buffers and scalars (T: float, double, std::int64_t) --------------------------------

template <class T>
void all_reduce(T* data, std::size_t count, ReduceOp op = ReduceOp::SUM);
template <class T>
void broadcast(T* data, std::size_t count, int src = 0);
// One value reduced over ranks, returned.
template <class T>
T all_reduce_scalar(T value, ReduceOp op = ReduceOp::SUM);
// Bytes of rank src on every rank; `data` must hold `bytes` bytes on every rank.
void broadcast_bytes(void* data, std::size_t bytes, int src = 0);
// Rank src's string on every rank (any length on the other ranks).
std::string broadcast_string(const std::string& s, int src = 0);
// Every rank's string, by rank (any lengths).
std::vector<std::string> all_gather_string(const std::string& s);

// ---- asynchronous all-reduce (DistributedDataParallel's buckets) --------------------------------

// A started MPI_Iallreduce (torch's Work). wait() blocks until done; the buffer must stay alive
// and untouched until then. Destroying an unfinished Work waits for it.
class Work {
 public:
  Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  bool valid() const { return impl_ != nullptr; }
  // MPI_Test: also drives Open MPI's progress, so polling during backward lets the reduction overlap.
  bool is_completed();
  void wait();

  struct Impl;
  explicit Work(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Starts an in-place all-reduce of data[0, count) (SUM or MAX; AVG is SUM here, divide after wait).
template <class T>
Work all_reduce_async(T* data, std::size_t count, ReduceOp op = ReduceOp::SUM);

extern template void all_reduce<float>(Tensor<float>&, ReduceOp);
extern template void all_reduce<double>(Tensor<double>&, ReduceOp);
extern template void broadcast<float>(Tensor<float>&, int);
extern template void broadcast<double>(Tensor<double>&, int);
extern template std::vector<Tensor<float>> all_gather<float>(const Tensor<float>&);
extern template std::vector<Tensor<double>> all_gather<double>(const Tensor<double>&);

}  // namespace xgrad::distributed
