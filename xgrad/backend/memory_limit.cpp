// process_memory_limit: physical memory from sysconf, capped by the limit of the cgroup named in
// /proc/self/cgroup (v2: memory.max; v1: the memory controller's memory.limit_in_bytes).
// process_memory_available: that limit minus the resident set, capped by MemAvailable, less a reserve.
#include <xgrad/backend/memory_limit.hpp>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include <xgrad/base/input.hpp>

namespace xgrad::detail {

namespace {

std::atomic<std::size_t> test_limit{0};

// The text of a small procfs, sysfs or cgroupfs file, or "" when it cannot be read (none is
// needed: each use has a fallback).
std::string read_small_file(const std::string& path) {
  try {
    return read_regular_file("process_memory_limit", path, std::uint64_t(1) << 20, "procfs file");
  } catch (const std::runtime_error&) {
    return "";
  }
}

// The first whitespace-separated words of `text`.
std::vector<std::string> words_of(const std::string& text, std::size_t n) {
  std::vector<std::string> words;
  std::size_t at = 0;
  while (words.size() < n) {
    const std::size_t begin = text.find_first_not_of(" \t\n", at);
    if (begin == std::string::npos) break;
    at = std::min(text.size(), text.find_first_of(" \t\n", begin));
    words.push_back(text.substr(begin, at - begin));
  }
  return words;
}

// The number in `path`, or none (absent, unreadable, or "max": no limit).
std::size_t read_limit(const std::string& path) {
  const auto words = words_of(read_small_file(path), 1);
  std::size_t limit = 0;
  if (words.empty() || integer_from_text(words[0], limit) != NumberStatus::ok)
    return std::numeric_limits<std::size_t>::max();
  return limit;
}

// The limit of the process's cgroup from /proc/self/cgroup: the line "0::/path" names its
// cgroup v2 group (limit in <group>/memory.max), a line "N:memory:/path" its v1 memory group
// (limit in memory<path>/memory.limit_in_bytes, a huge number when unlimited).
std::size_t cgroup_limit() {
  std::size_t limit = std::numeric_limits<std::size_t>::max();
  std::istringstream f(read_small_file("/proc/self/cgroup"));
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
  const auto statm = words_of(read_small_file("/proc/self/statm"), 2);
  std::size_t resident_pages = 0;
  const std::size_t resident =
      statm.size() == 2 && integer_from_text(statm[1], resident_pages) == NumberStatus::ok && page > 0
          ? resident_pages * static_cast<std::size_t>(page)
          : 0;
  std::size_t available = limit - std::min(limit, resident);
  std::istringstream meminfo(read_small_file("/proc/meminfo"));
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
