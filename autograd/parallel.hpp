// Intra-op threads, as in PyTorch: torch.set_num_threads / torch.get_num_threads.
//
// xgrad splits its own work across a small pool of threads: a large gemm is cut into row (or
// column) blocks, each a single-threaded BLAS call, and the heavy non-gemm kernels (GELU,
// LayerNorm, attention's heads, Adam) split their rows. BLAS itself is kept single-threaded, so
// the two never oversubscribe the cores. Small work stays on the calling thread.
//
// The default is std::thread::hardware_concurrency(), or OMP_NUM_THREADS when it is set (as in
// PyTorch). Results are deterministic for a given thread count; different counts may differ in
// the last bits (each split is its own BLAS call).
#pragma once

#include <cstddef>
#include <functional>

namespace xgrad {

// Sets the number of threads xgrad's kernels use (n >= 1; 1 runs everything on the caller).
void set_num_threads(int n);
int get_num_threads();

namespace detail {

// Calls fn(begin, end) on contiguous chunks covering [0, n), in parallel when the pool has more
// than one thread and n >= 2 * grain (each chunk then holds at least `grain` items), and
// returns when every chunk is done. A parallel_for inside a chunk runs serially on its thread.
// An exception thrown by a chunk is rethrown here (after the other chunks finish).
void parallel_for(std::size_t n, std::size_t grain, const std::function<void(std::size_t, std::size_t)>& fn);

// True inside a chunk running on a pool thread or on the caller during parallel_for.
bool in_parallel_region();

}  // namespace detail
}  // namespace xgrad
