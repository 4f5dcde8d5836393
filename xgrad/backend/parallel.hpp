// Intra-op threads, as in PyTorch: torch.set_num_threads / torch.get_num_threads.
//
// xgrad splits its own work across a small pool of threads: a large gemm is cut into row (or
// column) blocks, each a single-threaded BLAS or oneDNN call; row kernels (LayerNorm, softmax,
// attention's heads) split rows, memory-bound loops fixed blocks (parallel_loops.hpp), Adam flat
// blocks (optim/flat_chunks.hpp). BLAS is single-threaded and oneDNN runs on one OpenMP thread in
// a pool chunk, so they never oversubscribe the cores; set_num_threads(n) also sets the calling
// thread's OpenMP count (omp_set_num_threads), which oneDNN uses for the products it threads
// itself (backend/onednn.hpp). Small work stays on the calling thread.
//
// The default is std::thread::hardware_concurrency(), or OMP_NUM_THREADS when it is set (as in
// PyTorch). Results are deterministic for a given thread count; different counts may differ in
// the last bits (each split is its own BLAS call).
#pragma once

#include <cstddef>
#include <cstdint>

namespace xgrad {

// Sets the number of threads xgrad's kernels use (n >= 1; 1 runs everything on the caller).
// All or nothing: when a thread cannot be created (the process or user is at its thread or
// memory limit), the pool goes back to its previous size and a std::runtime_error names
// set_num_threads, the count asked for and the reason.
void set_num_threads(int n);
int get_num_threads();

namespace detail {

// The pool's entry point behind parallel_for: fn(ctx, begin, end) per chunk.
using RangeFn = void (*)(const void* ctx, std::size_t begin, std::size_t end);
void parallel_for_impl(std::size_t n, std::size_t grain, RangeFn fn, const void* ctx);

// Calls fn(begin, end) on contiguous chunks covering [0, n), in parallel when the pool has more
// than one thread and n >= 2 * grain (each chunk then holds at least `grain` items), and
// returns when every chunk is done. A parallel_for inside a chunk runs serially on its thread.
// An exception thrown by a chunk is rethrown here (after the other chunks finish). Work below
// 2 * grain runs inline, with no allocation and no synchronization.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, const F& fn) {
  if (n == 0) return;
  if (n < 2 * grain || n < 2) {
    fn(std::size_t(0), n);
    return;
  }
  parallel_for_impl(
      n, grain, [](const void* ctx, std::size_t b, std::size_t e) { (*static_cast<const F*>(ctx))(b, e); }, &fn);
}

// True on a pool thread, and on the caller while it runs chunks of a parallel job; false in a
// parallel_for that runs inline (one thread, or less than 2 * grain of work).
bool in_parallel_region();

// For tests: hook(i) is called before the pool creates worker thread i (1-based: thread 0 is
// the caller); a hook that throws stands for a failed thread creation. nullptr removes it.
void set_thread_start_hook(void (*hook)(int worker));

// What the profiler (core/profiler.cpp) sees of the pool: while an observer is set, each job
// reports once on its caller when it ends, and each chunk on the thread that ran it. Times are
// std::chrono::steady_clock nanoseconds. Without an observer the pool pays one relaxed load per job.
struct PoolEvent {
  enum class Kind { Job, Chunk } kind;
  int worker;               // 0: the job's caller; 1..n-1: the pool's threads
  std::uint64_t job;        // the job's number
  std::int64_t publish_ns;  // when the job was published
  std::int64_t start_ns, end_ns;
  std::size_t items;  // the job's n, or the chunk's items
  bool first;         // a chunk: the first this thread ran of this job
};
using PoolObserver = void (*)(const PoolEvent&);
void set_pool_observer(PoolObserver observer);  // nullptr: none

}  // namespace detail
}  // namespace xgrad
