// libFuzzer target for the profiler's Chrome trace (xgrad/core/profiler.hpp). Every input is a
// script of range opens and closes (fuzz/profiler_script.hpp: names of any bytes, closes out of
// order and on other threads, parallel jobs, a stop() midway) run under a profile; the profile's
// events and trace must then hold tests/support/profile_checks.hpp's invariants: the trace parses
// as JSON (nlohmann), each name shown as it is when it is UTF-8 and with U+FFFD when it is not,
// every event inside its parent, no self time negative. A broken one aborts, naming it; a crash,
// a sanitizer report, a leak or a hang is a finding too.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "profiler_script.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string violation = xgrad_fuzz::run_profiler_script(data, size);
  if (!violation.empty()) {
    std::fprintf(stderr, "fuzz_profiler_trace: %s\n", violation.c_str());
    std::abort();
  }
  return 0;
}
