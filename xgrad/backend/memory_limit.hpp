// Internal: how much memory this process can have, for kernels that check a large allocation
// before making it (attention's materialized path) instead of being killed by the kernel's
// out-of-memory handler halfway through a step.
#pragma once

#include <cstddef>

namespace xgrad::detail {

// The smaller of the machine's physical memory (sysconf) and the memory limit of the process's
// cgroup when one is set (cgroup v2 memory.max, or v1 memory.limit_in_bytes). Read once.
std::size_t process_memory_limit();

// For tests: makes process_memory_limit() return `bytes` (0: the real limit again).
void set_process_memory_limit_for_testing(std::size_t bytes);

}  // namespace xgrad::detail
