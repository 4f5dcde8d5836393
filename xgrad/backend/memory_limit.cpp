// process_memory_limit: physical memory from sysconf, capped by the limit of the cgroup named in
// /proc/self/cgroup (v2: memory.max; v1: the memory controller's memory.limit_in_bytes).
// process_memory_available: that limit minus the resident set, capped by MemAvailable, less a reserve.
#include <xgrad/backend/memory_limit.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>

namespace xgrad::detail {

namespace {

std::atomic<std::size_t> test_limit{0};

// The number in `path`, or none (absent, unreadable, or "max": no limit).
std::size_t read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word == "max") return std::numeric_limits<std::size_t>::max();
  try {
    return static_cast<std::size_t>(std::stoull(word));
  } catch (const std::exception&) {
    return std::numeric_limits<std::size_t>::max();
  }
}

// The limit of the process's cgroup from /proc/self/cgroup: the line "0::/path" names its
// cgroup v2 group (limit in <group>/memory.max), a line "N:memory:/path" its v1 memory group
// (limit in memory<path>/memory.limit_in_bytes, a huge number when unlimited).
std::size_t cgroup_limit() {
  std::size_t limit = std::numeric_limits<std::size_t>::max();
  std::ifstream f("/proc/self/cgroup");
  for (std::string line; std::getline(f, line);) {
    const std::size_t colon = line.find(':'), path = line.find(':', colon + 1) + 1;
    if (colon == std::string::npos || path == 0) continue;
    const std::string controllers = line.substr(colon + 1, path - colon - 2), group = line.substr(path);
    if (controllers.empty()) limit = std::min(limit, read_limit("/sys/fs/cgroup" + group + "/memory.max"));
    else if (controllers == "memory")
      limit = std::min(limit, read_limit("/sys/fs/cgroup/memory" + group + "/memory.limit_in_bytes"));
  }
  return limit;
}

std::size_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<std::size_t>::max();
  return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
}

}  // namespace

std::size_t process_memory_limit() {
  if (const std::size_t t = test_limit.load()) return t;
  static const std::size_t limit = std::min(physical_memory(), cgroup_limit());
  return limit;
}

std::size_t process_memory_available() {
  if (const std::size_t t = test_limit.load()) return t;
  const std::size_t limit = process_memory_limit();
  const long page = ::sysconf(_SC_PAGE_SIZE);
  std::size_t size_pages = 0, resident_pages = 0;
  std::ifstream statm("/proc/self/statm");
  const std::size_t resident = statm >> size_pages >> resident_pages && page > 0
                                   ? resident_pages * static_cast<std::size_t>(page)
                                   : 0;
  std::size_t available = limit - std::min(limit, resident);
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    std::size_t kib = 0;
    if (key == "MemAvailable:" && meminfo >> kib) {
      available = std::min(available, kib * 1024);
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  const std::size_t reserve = limit / 16;
  return available - std::min(available, reserve);
}

void set_process_memory_limit_for_testing(std::size_t bytes) { test_limit.store(bytes); }

}  // namespace xgrad::detail
