// What the benchmark programs share: wall-clock timing, the median of repeated measurements and
// the process's peak resident set (each configuration runs in its own process, so that peak is
// the configuration's alone).
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace xgrad::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Mean microseconds per call of `calls` back-to-back calls of step().
template <class F>
double time_us(F&& step, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) step();
  return seconds_since(t0) * 1e6 / calls;
}

// The upper median (the middle element of an odd count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The process's peak resident set so far, MiB (getrusage's ru_maxrss is in KiB on Linux).
inline double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// The King James Bible's verses as Debian's `bible` prints them (package bible-kjv; headers and
// verse numbers kept: they are text too), or "" when the program is missing.
inline std::string read_kjv() {
  FILE* pipe = popen("COLUMNS=1000 bible \"gen1:1-rev22:21\" 2>/dev/null", "r");
  std::string all;
  if (pipe != nullptr) {
    char buffer[1 << 16];
    for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) all.append(buffer, n);
    pclose(pipe);
  }
  return all;
}

}  // namespace xgrad::bench
