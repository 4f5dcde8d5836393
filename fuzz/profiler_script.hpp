// The profiler's fuzz input (fuzz_profiler_trace), shared with fuzz_seeds, which writes the seeds
// with Script and checks each the same way.
//
// An input is a script of range opens and closes, run under a profile on the calling thread, with
// some steps on other threads and on the pool's; then the profile stops and its events and Chrome
// trace must hold what tests/support/profile_checks.hpp checks: the trace parses as JSON whatever
// the names' bytes, every event lies inside its parent, no self time is negative. Each step is an
// opcode byte (its value modulo 8), then its argument bytes (what the input lacks reads as 0):
//   0 name-length bytes...  open a user range (record_function) named by the next (length % 64)
//                           bytes, any bytes: invalid UTF-8, quotes, control characters, NULs
//   1                       open an op's range (as XGRAD_PROFILE_OP)
//   2                       open a node's backward range
//   3 k                     close the k-th innermost range still held (k % held; 0: the innermost,
//                           else out of order, as RAII misused)
//   4 k                     the same, on another thread
//   5 name-length bytes...  open a user range on another thread, held from then on here
//   6 n                     a parallel job of (n % 16) items on the pool (2 threads), each chunk a
//                           range on the thread that runs it
//   7                       stop the profile (the steps after record nothing; closes are ignored)
// At most 8 steps a script start a thread; further ones run here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/profiler.hpp>

#include "../tests/support/profile_checks.hpp"

namespace xgrad_fuzz {

namespace prof = xgrad::profiler;

// A range opened by the script: a user range, or an op's or backward's handle.
struct HeldRange {
  std::unique_ptr<prof::RecordFunction> range;
  std::uint64_t handle = 0;
  void close() {
    range.reset();
    if (handle != 0) prof::detail::close(handle);
    handle = 0;
  }
};

class ScriptRunner {
 public:
  ScriptRunner(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  // Runs the script; returns the first broken invariant of its profile, or "".
  std::string run() {
    static const bool pool = (xgrad::set_num_threads(2), true);
    (void)pool;
    auto profile = std::make_unique<prof::Profile>();
    while (at_ < size_) {
      const int opcode = next() % 8;
      if (opcode == 7 && profile->recording()) profile->stop();
      if (opcode == 7) continue;
      step(opcode);
    }
    if (profile->recording()) profile->stop();
    for (HeldRange& r : held_) r.close();  // after stop(): ignored
    return xgrad::testing::profile_violation(*profile);
  }

 private:
  std::uint8_t next() { return at_ < size_ ? data_[at_++] : 0; }

  std::string name() {
    std::string s;
    for (int n = next() % 64; n > 0 && at_ < size_; --n) s += static_cast<char>(next());
    return s;
  }

  // Runs f on a new thread, or here once the script has started 8.
  template <class F>
  void elsewhere(F&& f) {
    if (threads_++ >= 8) return f();
    std::thread(f).join();
  }

  void step(int opcode) {
    switch (opcode) {
      case 0:
        held_.push_back({std::make_unique<prof::RecordFunction>(name()), 0});
        break;
      case 1:
        held_.push_back({nullptr, prof::detail::open("fuzz_op", prof::Event::Kind::Op)});
        break;
      case 2:
        held_.push_back({nullptr, prof::detail::open("fuzz_op", prof::Event::Kind::Backward)});
        break;
      case 3:
      case 4: {
        const std::size_t k = next();
        if (held_.empty()) break;
        const std::size_t i = held_.size() - 1 - k % held_.size();
        HeldRange r = std::move(held_[i]);
        held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
        if (opcode == 3)
          r.close();
        else
          elsewhere([&] { r.close(); });
        break;
      }
      case 5: {
        const std::string n = name();
        HeldRange r;
        elsewhere([&] { r.range = std::make_unique<prof::RecordFunction>(n); });
        held_.push_back(std::move(r));
        break;
      }
      case 6:
        xgrad::detail::parallel_for(next() % 16, 1, [](std::size_t, std::size_t) { prof::RecordFunction r("chunk"); });
        break;
    }
  }

  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
  int threads_ = 0;
  std::vector<HeldRange> held_;
};

inline std::string run_profiler_script(const std::uint8_t* data, std::size_t size) {
  return ScriptRunner(data, size).run();
}

// Writes scripts for the seeds: Script().open("a\xff").op().close(1).bytes().
class Script {
 public:
  Script& open(const std::string& name) { return named(0, name); }
  Script& op() { return code(1); }
  Script& backward() { return code(2); }
  Script& close(std::uint8_t k = 0) { return code(3).code(k); }
  Script& close_elsewhere(std::uint8_t k = 0) { return code(4).code(k); }
  Script& open_elsewhere(const std::string& name) { return named(5, name); }
  Script& parallel(std::uint8_t items) { return code(6).code(items); }
  Script& stop() { return code(7); }
  const std::string& bytes() const { return bytes_; }

 private:
  Script& code(std::uint8_t c) {
    bytes_ += static_cast<char>(c);
    return *this;
  }
  Script& named(std::uint8_t c, const std::string& name) {
    if (name.size() >= 64) throw std::invalid_argument("Script: a name of 64 bytes or more: " + name);
    code(c).code(static_cast<std::uint8_t>(name.size()));
    bytes_ += name;
    return *this;
  }
  std::string bytes_;
};

}  // namespace xgrad_fuzz
