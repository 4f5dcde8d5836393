// The profiler (xgrad/core/profiler.hpp) with several threads: a range closed on another thread
// than the one that opened it, and profiles stopped while other threads record.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <xgrad/xgrad.hpp>
#include "profile_checks.hpp"

namespace {

namespace prof = xgrad::profiler;

using xgrad::testing::event_index;
using xgrad::testing::event_named;
using xgrad::testing::profile_violation;

// A range ends in the events of the thread that opened it, whichever thread closes it, and the
// ranges opened inside it there end with it. It used to be ended in the closing thread's events,
// at the range's index there: another range of that thread was ended (and left its stack of open
// ranges) while the range itself stayed open to the end of the profile.
TEST(ProfilerThreads, RangeClosedOnAnotherThreadEndsOnItsOwn) {
  prof::Profile p;
  {
    auto main_outer = prof::record_function("main_outer");
    std::unique_ptr<prof::RecordFunction> worker_range, worker_child;
    std::thread([&] {
      worker_range = std::make_unique<prof::RecordFunction>("worker_range");
      worker_child = std::make_unique<prof::RecordFunction>("worker_child");
    }).join();
    worker_range.reset();  // closed here: ends on the worker's row, worker_child with it
    worker_child.reset();
    { auto r = prof::record_function("main_inner"); }
    // And the other way: opened here, closed on another thread.
    auto handed_over = std::make_unique<prof::RecordFunction>("handed_over");
    std::thread([&] { handed_over.reset(); }).join();
    { auto r = prof::record_function("main_last"); }
  }
  p.stop();
  EXPECT_EQ(profile_violation(p), "");
  const prof::Event &range = event_named(p, "worker_range"), &child = event_named(p, "worker_child");
  EXPECT_NE(range.thread, event_named(p, "main_outer").thread);
  EXPECT_EQ(child.parent, event_index(p, "worker_range"));
  EXPECT_EQ(child.end_ns, range.end_ns);
  EXPECT_LE(range.end_ns, event_named(p, "main_inner").start_ns);
  const int outer = event_index(p, "main_outer");
  EXPECT_EQ(event_named(p, "main_inner").parent, outer);
  EXPECT_EQ(event_named(p, "handed_over").parent, outer);
  EXPECT_LE(event_named(p, "handed_over").end_ns, event_named(p, "main_last").start_ns);
  EXPECT_EQ(event_named(p, "main_last").parent, outer);
}

// Profiles stopped while two threads open and close nested ranges: what they record up to the
// moment stop() takes the profile's end is kept, cut there, and what begins after it is left out.
// A range opened in between used to show after the end of its parent, in a few stops of a
// hundred. Each profile starts a batch of at most 1,000 pairs of ranges a thread and stops while
// they run; the loop runs for about a second (and 10 profiles at least, under TSan: 2-3 s).
TEST(ProfilerThreads, StopWhileOtherThreadsRecordKeepsEachEventInsideItsParent) {
  std::atomic<bool> done{false};
  std::atomic<int> batch{0}, pairs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&] {
      for (int seen = 0; !done.load();) {
        if (batch.load() == seen) {
          std::this_thread::yield();
          continue;
        }
        seen = batch.load();
        for (int i = 0; i < 1000 && !done.load(std::memory_order_relaxed); ++i) {
          auto outer = prof::record_function("outer");
          auto inner = prof::record_function("inner");
          pairs.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  int profiles = 0, broken = 0;
  std::string first;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (profiles < 10 || std::chrono::steady_clock::now() < until) {
    prof::Profile p;
    pairs = 0;
    batch += 1;
    while (pairs.load(std::memory_order_relaxed) < 50) std::this_thread::yield();
    p.stop();
    const std::string violation = profile_violation(p);
    if (!violation.empty() && broken++ == 0) first = violation;
    ++profiles;
  }
  done = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(broken, 0) << "in " << profiles << " profiles; the first: " << first;
}

}  // namespace
