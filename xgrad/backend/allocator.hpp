// How tensor memory comes back from malloc, for programs that train in a loop.
//
// set_allocator_tuning(true) asks glibc to keep freed blocks for reuse (the mmap threshold pinned
// at 32 MiB, no heap trimming), so a training step does not fault its memory in again, page by
// zero-filled page, after the previous step freed it; the process keeps its peak heap. It changes
// malloc for the whole process, so the library never calls it by itself: a program opts in (the
// examples and the benchmark do, unless XGRAD_MALLOC_TUNING=0 is in the environment; see
// allocator_tuning_from_env).
//
// The array cache is the library's own, and on by default: every thread keeps the buffers of the
// Arrays the engine drops, in lists by exact element count, and empty_array (array.hpp) takes one
// of the same count before asking malloc. A training step allocates the same sizes every step and
// frees what it allocated, so from the second step on its tensor buffers all come from the cache.
// It is bounded by what the thread itself used: a buffer of a given element count is kept only
// while the cached and outstanding buffers of that count stay within the most that were out at
// once, and the cache's bytes within twice the thread's live high-water mark (the most bytes it
// had taken through empty_array and not yet handed back, at once), at least kArrayCacheBytes. A
// buffer freed on a thread that never takes its count is freed. The cache keeps that memory
// between steps (as glibc does with set_allocator_tuning, and PyTorch's GPU caching allocator):
// set_array_cache(false) hands it back. Off under AddressSanitizer so that a use after free is
// still caught, and off with XGRAD_ARRAY_CACHE=0 in the environment. Buffers come back
// uninitialized, as from malloc; numerics do not change. docs/performance.md has the measurements.
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

// The cache's byte bound per thread and element type is 2 * max(high-water mark, kArrayCacheBytes).
constexpr std::size_t kArrayCacheBytes = std::size_t{4} << 20;

// The calling thread's array cache, summed over float and double (for tests and benchmarks).
struct ArrayCacheStats {
  std::size_t cached_bytes = 0;   // held now
  std::size_t cached_blocks = 0;
  std::uint64_t hits = 0;         // empty_array served from the cache
  std::uint64_t misses = 0;       // empty_array that had to allocate
  std::size_t live_bytes = 0;     // taken through empty_array, not yet handed back
  std::size_t high_water_bytes = 0;
  std::size_t bound_bytes = 0;  // what cached_bytes stays within: 2 max(high-water, kArrayCacheBytes) per type
};
ArrayCacheStats array_cache_stats();

}  // namespace xgrad
