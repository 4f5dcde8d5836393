// How tensor memory comes back from malloc, for programs that train in a loop.
//
// Every Array is a malloc'd buffer. glibc's defaults hand large freed blocks back to the kernel
// (blocks above the dynamic mmap threshold are unmapped when freed; the top of the heap is trimmed
// past the trim threshold). A training step frees its whole graph at the end of backward, so the
// next step faults all of its memory in again, each page zero-filled by the kernel: 2-10% of a
// step in benchmarks/. set_allocator_tuning(true) pins the mmap threshold at glibc's maximum
// (32 MiB) and turns off trimming, so freed blocks are kept for reuse, as PyTorch's caching
// allocator does on GPUs; the process keeps its peak heap.
//
// It changes malloc for the whole process, so the library never calls it by itself: a program
// opts in (the examples and the benchmark do, unless XGRAD_MALLOC_TUNING=0 is in the
// environment; see allocator_tuning_from_env).
//
// The array cache is the library's own, and on by default: every thread keeps the buffers of the
// Arrays the engine drops (a graph's values when it is freed, gradients once passed on or added
// in, zero_grad(true)'s gradients) in lists by exact element count, and empty_array, which every
// op's result comes from, takes one of the same count before asking malloc. A training step
// allocates the same sizes every step, so after the first step most results reuse a buffer; no
// memalign, no arena lock, no consolidation of glibc's bins (half of a tiny model's step).
// It is bounded (kArrayCacheBytes per thread and per element type, kArrayCacheBlocksPerSize
// buffers of one size, buffers up to kArrayCacheBlockBytes; beyond that they are freed as before), and off under AddressSanitizer
// so that a use after free is still caught. XGRAD_ARRAY_CACHE=0 in the environment turns it off.
// Buffers come back uninitialized, as from malloc; numerics do not change.
#pragma once

#include <cstddef>
#include <cstdint>

namespace xgrad {

// true: keep freed blocks (see above); false: glibc's default thresholds (128 KiB, fixed from
// then on). Returns false when the C library is not glibc or refused the setting.
bool set_allocator_tuning(bool enabled);

// Whether set_allocator_tuning(true) is in force in this process.
bool allocator_tuning();

// set_allocator_tuning(true) unless the environment has XGRAD_MALLOC_TUNING=0: the one line the
// example programs and the benchmark start with. Returns whether tuning is now in force.
bool allocator_tuning_from_env();

// Turns the array cache (above) on or off for all threads; off also frees the calling thread's
// cached buffers (other threads free theirs at their next cache operation or when they exit).
// Under AddressSanitizer it stays off.
void set_array_cache(bool enabled);
bool array_cache_enabled();

constexpr std::size_t kArrayCacheBytes = std::size_t{4} << 20;       // per thread and element type
constexpr std::size_t kArrayCacheBlockBytes = std::size_t{64} << 10;  // larger buffers are not kept
constexpr std::size_t kArrayCacheBlocksPerSize = 64;  // buffers kept per element count

// The calling thread's array cache, summed over float and double (for tests and benchmarks).
struct ArrayCacheStats {
  std::size_t cached_bytes = 0;   // held now
  std::size_t cached_blocks = 0;
  std::uint64_t hits = 0;         // empty_array served from the cache
  std::uint64_t misses = 0;       // empty_array that had to allocate
};
ArrayCacheStats array_cache_stats();

}  // namespace xgrad
