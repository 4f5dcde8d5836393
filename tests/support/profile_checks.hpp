// What every stopped profile (xgrad/core/profiler.hpp) must hold, whatever its ranges' names and
// the order or the threads their closes came in: checked by the profiler's tests and by its
// fuzzer (fuzz/fuzz_profiler_trace.cpp), so it includes neither gtest nor anything of the tests.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/core/profiler.hpp>

namespace xgrad::testing {

// Whether nlohmann can write `s` into JSON as it is (it refuses what is not UTF-8).
inline bool is_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

// The index in p.events() of the first event named `name`; throws std::out_of_range when none is.
inline int event_index(const profiler::Profile& p, const std::string& name) {
  const auto& events = p.events();
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].name == name) return static_cast<int>(i);
  throw std::out_of_range("the profile has no event named '" + name + "'");
}
inline const profiler::Event& event_named(const profiler::Profile& p, const std::string& name) {
  return p.events()[static_cast<std::size_t>(event_index(p, name))];
}

// The first broken invariant of a stopped profile, or "" when they all hold:
//  - every event lies within the profile, and inside its parent, which is listed before it, is an
//    op or a range and ran on the same thread;
//  - every op and range has a self time between 0 and its duration;
//  - the Chrome trace parses as JSON, with one complete ("X") event per event, in order, named as
//    the event when its name is UTF-8, and with U+FFFD in its name when it is not.
inline std::string profile_violation(const profiler::Profile& p) {
  using profiler::Event;
  const auto& events = p.events();
  const auto is_pool = [](const Event& e) {
    return e.kind == Event::Kind::PoolJob || e.kind == Event::Kind::PoolChunk;
  };
  for (std::size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    const std::string what = "event " + std::to_string(i) + " (" + e.name + ", [" + std::to_string(e.start_ns) + ", " +
                             std::to_string(e.end_ns) + "] ns)";
    if (e.start_ns < 0 || e.end_ns < e.start_ns || e.end_ns > p.duration_ns())
      return what + " is not within the profile's " + std::to_string(p.duration_ns()) + " ns";
    if (!is_pool(e) && (e.self_ns < 0 || e.self_ns > e.duration_ns()))
      return what + " has a self time of " + std::to_string(e.self_ns) + " ns";
    if (e.parent < 0) continue;
    if (e.parent >= static_cast<int>(i)) return what + " has a parent listed after it";
    const Event& parent = events[static_cast<std::size_t>(e.parent)];
    if (is_pool(parent) || parent.thread != e.thread) return what + " has a pool event or another thread's as parent";
    if (e.start_ns < parent.start_ns || e.end_ns > parent.end_ns)
      return what + " is not inside its parent " + parent.name + " [" + std::to_string(parent.start_ns) + ", " +
             std::to_string(parent.end_ns) + "]";
  }
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(p.chrome_trace_json());
  } catch (const nlohmann::json::exception& e) {
    return std::string("the Chrome trace is not JSON: ") + e.what();
  }
  std::size_t next = 0;
  for (const auto& t : trace.at("traceEvents")) {
    if (t.at("ph") != "X") continue;
    if (next == events.size()) return "the Chrome trace has more events than the profile";
    const std::string& name = events[next++].name;
    const std::string shown = t.at("name").get<std::string>();
    if (is_utf8(name) ? shown != name : shown.find("\xEF\xBF\xBD") == std::string::npos)
      return "the Chrome trace shows the event named '" + name + "' as '" + shown + "'";
  }
  if (next != events.size()) return "the Chrome trace has fewer events than the profile";
  return "";
}

}  // namespace xgrad::testing
