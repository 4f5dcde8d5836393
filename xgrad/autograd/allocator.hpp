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
#pragma once

namespace xgrad {

// true: keep freed blocks (see above); false: glibc's default thresholds (128 KiB, fixed from
// then on). Returns false when the C library is not glibc or refused the setting.
bool set_allocator_tuning(bool enabled);

// Whether set_allocator_tuning(true) is in force in this process.
bool allocator_tuning();

// set_allocator_tuning(true) unless the environment has XGRAD_MALLOC_TUNING=0: the one line the
// example programs and the benchmark start with. Returns whether tuning is now in force.
bool allocator_tuning_from_env();

}  // namespace xgrad
