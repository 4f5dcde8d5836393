// Internal: how much memory this process can have, for kernels that check a large allocation
// before making it (attention's materialized path) instead of being killed by the kernel's
// out-of-memory handler halfway through a step.
#pragma once

#include <cstddef>

namespace xgrad::detail {

// The smaller of the machine's physical memory (sysconf) and the memory limit of the process's
// cgroup when one is set (cgroup v2 memory.max, or v1 memory.limit_in_bytes). Read once.
std::size_t process_memory_limit();

// What the process can still get: process_memory_limit() minus its resident set (/proc/self/statm),
// and no more than the machine's MemAvailable (/proc/meminfo), which other processes' memory lowers,
// less a reserve of 1/16 of the limit for what the caller allocates next to the checked array (a
// model's other activations: a GPT layer at 8,192 tokens adds about 300 MiB beside its 3 GiB of P).
// Reads the two files at each call (tens of microseconds): for checks of large allocations only.
std::size_t process_memory_available();

// For tests: makes process_memory_limit() and process_memory_available() return `bytes` (0: the
// real values again).
void set_process_memory_limit_for_testing(std::size_t bytes);

}  // namespace xgrad::detail
