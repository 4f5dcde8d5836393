// The profiler (profiler.hpp): per-thread event buffers, the pool observer, and what a stopped
// profile computes from them (self times, key_averages, pool_stats, the Chrome trace).
//
// Each thread that records during a profile gets a buffer of its own, registered with the
// profile's session on its first event; its events are pushed under the buffer's mutex (never
// contended except by stop(), which reads every buffer once, and by a range closed on another
// thread). A range's handle names the session and the range's serial number in it, so a range
// that closes after its profile stopped, or in a later one, is ignored, and one closed on another
// thread ends in the buffer of the thread that opened it.
//
// What keeps the events a tree whatever the order of the closes (docs/profiler.md, "How ranges nest"):
//  - closing a range also ends, at the same instant, every range opened inside it that is still
//    open on its thread (their own closes come later and are ignored), so a child never outlasts
//    its parent and self times are never negative;
//  - a close reads the clock under the buffer's mutex, so it comes after every start pushed there;
//  - stop() clips every event to the profile and to its parent, and leaves out the events that
//    began after it took the profile's end (a thread still recording while stop() collects).
#include <xgrad/core/profiler.hpp>

#include <cxxabi.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/base/check.hpp>
#include <xgrad/serialize/atomic_file.hpp>

namespace xgrad::profiler {

namespace detail {
std::atomic<bool> recording{false};
}  // namespace detail

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using Shapes = std::vector<std::vector<std::int64_t>>;

// An event as a thread records it: the name is a pointer (a literal, a node's op) or an index
// into the buffer's copied names; times are steady_clock nanoseconds; end < 0 while open.
struct Raw {
  const char* name = nullptr;
  int copy = -1;
  Event::Kind kind = Event::Kind::Op;
  int parent = -1;           // the open op or range around it, in this buffer
  std::uint32_t serial = 0;  // an op or range: its number in the session (its handle's low half)
  std::int64_t start = 0, end = -1;
  int shapes = -1;  // index into ThreadBuffer::shapes
  int worker = -1;
  std::uint64_t job = 0;
  std::int64_t items = 0, publish = 0;
  bool first = false;
};

struct ThreadBuffer {
  std::mutex mutex;
  int thread = 0;
  std::vector<Raw> events;
  std::vector<int> open;  // the op and range events open on this thread, innermost last
  std::vector<std::string> names;
  std::vector<Shapes> shapes;
};

// The recording profile, if any: its number, options and every thread's buffer.
struct Session {
  std::mutex mutex;
  bool active = false;
  bool record_shapes = false;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::atomic<std::uint32_t> serials{0};  // the ranges opened so far, on every thread
};
Session& session() {
  static Session s;
  return s;
}
std::atomic<std::uint32_t> session_id{0};

struct ThreadState {
  std::uint32_t id = 0;
  std::shared_ptr<ThreadBuffer> buffer;
};
thread_local ThreadState t_state;

// This thread's buffer in the recording session (registered on first use), or null when no
// session records.
ThreadBuffer* buffer() {
  const std::uint32_t id = session_id.load(std::memory_order_acquire);
  if (t_state.id == id && t_state.buffer) return t_state.buffer.get();
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.active || session_id.load(std::memory_order_relaxed) != id) return nullptr;
  auto b = std::make_shared<ThreadBuffer>();
  b->thread = static_cast<int>(s.buffers.size());
  s.buffers.push_back(b);
  t_state.id = id;
  t_state.buffer = std::move(b);
  return t_state.buffer.get();
}

// A range's handle: its session's number, then its serial (from 1; 2^32 - 1 ranges a profile).
std::uint64_t push_open(Raw raw) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  raw.serial = session().serials.fetch_add(1, std::memory_order_relaxed) + 1;
  std::lock_guard<std::mutex> lock(b->mutex);
  raw.parent = b->open.empty() ? -1 : b->open.back();
  raw.start = now_ns();
  b->events.push_back(raw);
  b->open.push_back(static_cast<int>(b->events.size() - 1));
  return std::uint64_t(t_state.id) << 32 | raw.serial;
}

// Ends the range `serial` if it is open in `b`, and with it every range opened inside it that is
// still open there (as leaving a scope ends the scopes inside it); false when it is not open in `b`.
bool close_in(ThreadBuffer& b, std::uint32_t serial) {
  std::lock_guard<std::mutex> lock(b.mutex);
  const auto it = std::find_if(b.open.rbegin(), b.open.rend(),
                               [&](int i) { return b.events[static_cast<std::size_t>(i)].serial == serial; });
  if (it == b.open.rend()) return false;
  const std::int64_t end = now_ns();  // under the mutex: after every start pushed before
  const auto from = std::next(it).base();
  for (auto i = from; i != b.open.end(); ++i) b.events[static_cast<std::size_t>(*i)].end = end;
  b.open.erase(from, b.open.end());
  return true;
}

void on_pool_event(const xgrad::detail::PoolEvent& e) {
  if (!detail::on()) return;
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  Raw r;
  r.kind = e.kind == xgrad::detail::PoolEvent::Kind::Job ? Event::Kind::PoolJob : Event::Kind::PoolChunk;
  r.parent = b->open.empty() ? -1 : b->open.back();
  r.start = e.start_ns;
  r.end = e.end_ns;
  r.worker = e.worker;
  r.job = e.job;
  r.items = static_cast<std::int64_t>(e.items);
  r.publish = e.publish_ns;
  r.first = e.first;
  b->events.push_back(r);
}

// "layer_norm" -> "LayerNorm".
std::string camel_case(const std::string& op) {
  std::string out;
  bool upper = true;
  for (char c : op) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

// An autograd::Function's op is its class's typeid name: "4SiLU" or "N3app4SiLUE" -> "SiLU",
// "app::SiLU". The built-in ops' names are lower case and pass unchanged.
std::string readable(const char* name) {
  const char c = name[0];
  if (!(std::isdigit(static_cast<unsigned char>(c)) || c == 'N' || c == 'Z')) return name;
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return name;
  std::string out(d);
  std::free(d);
  return out;
}

// A built-in op's node is named as the op ("layer_norm" -> "LayerNormBackward"); an
// autograd::Function's node already carries PyTorch's grad_fn name ("my::SiLUBackward"), kept as
// it is; a mangled name is demangled first.
std::string backward_name(const char* op) {
  const std::string name = readable(op);
  const std::string suffix = "Backward";
  if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name;
  const bool builtin = name == op;
  return (builtin ? camel_case(name) : name) + suffix;
}

std::string shapes_text(const Shapes& shapes) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    s << (i ? ", " : "") << '[';
    for (std::size_t j = 0; j < shapes[i].size(); ++j) s << (j ? ", " : "") << shapes[i][j];
    s << ']';
  }
  s << ']';
  return s.str();
}

// torch's time format: "12.345us", "1.234ms", "2.345s".
std::string format_time(double ns) {
  char buf[32];
  if (ns >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3fs", ns / 1e9);
  else if (ns >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3fms", ns / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3fus", ns / 1e3);
  return buf;
}

std::string format_percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

// The character at s[i]: its bytes, and whether they are well-formed UTF-8 (RFC 3629: no overlong
// form, no surrogate, nothing past U+10FFFF). A malformed one is the longest start of a character
// found there (at least one byte), which one U+FFFD replaces, as Unicode recommends (and Python's
// errors="replace" does).
struct Utf8Char {
  std::size_t size;
  bool valid;
};
Utf8Char utf8_char(const std::string& s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {1, true};
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // else overlong
    if (c == 0xED) hi = 0x9F;  // else a surrogate
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // else overlong
    if (c == 0xF4) hi = 0x8F;  // else past U+10FFFF
  } else {
    return {1, false};  // a continuation byte, an overlong lead (C0, C1) or F5..FF
  }
  for (std::size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return {k, false};
  }
  return {n, true};
}

// `s` as the inside of a JSON string: quotes, backslashes and control characters escaped, and
// what is not UTF-8 replaced by U+FFFD -- a range's name may hold any bytes, and a JSON parser
// refuses a string that is not UTF-8.
std::string json_escape(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const Utf8Char ch = utf8_char(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    if (!ch.valid) {
      out += "\xEF\xBF\xBD";
    } else if (ch.size > 1) {
      out.append(s, i, ch.size);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
    i += ch.size;
  }
  return out;
}

bool is_pool(Event::Kind k) { return k == Event::Kind::PoolJob || k == Event::Kind::PoolChunk; }

using BackwardNames = std::unordered_map<const char*, std::string>;  // a node's op -> its backward's name

std::string event_name(const Raw& r, const ThreadBuffer& b, BackwardNames& backward_names) {
  if (r.copy >= 0) return b.names[static_cast<std::size_t>(r.copy)];
  switch (r.kind) {
    case Event::Kind::Backward: {
      auto it = backward_names.find(r.name);
      if (it == backward_names.end()) it = backward_names.emplace(r.name, backward_name(r.name)).first;
      return it->second;
    }
    case Event::Kind::PoolJob:
      return "parallel_for";
    case Event::Kind::PoolChunk:
      return "chunk";
    default:
      return readable(r.name);
  }
}

// Appends one thread's events to `out`, in nanoseconds from `start`, each within its parent (or,
// at the top, within the profile, [start, end]): an event still open ends at `end`, and an event
// that began at or after `end` -- on a thread still recording while stop() collects -- is left
// out with the events inside it. Returns the pool worker the thread ran chunks as (-1: none).
int append_thread(const ThreadBuffer& b, std::int64_t start, std::int64_t end, BackwardNames& backward_names,
                  std::vector<Event>& out) {
  std::vector<int> place(b.events.size(), -1);  // each raw event's index in `out`; -1: left out
  int worker = -1;
  for (std::size_t i = 0; i < b.events.size(); ++i) {
    const Raw& r = b.events[i];
    const int parent = r.parent < 0 ? -1 : place[static_cast<std::size_t>(r.parent)];
    if (r.start >= end || (r.parent >= 0 && parent < 0)) continue;
    std::int64_t lo = start, hi = end;
    if (parent >= 0) {
      lo = start + out[static_cast<std::size_t>(parent)].start_ns;
      hi = start + out[static_cast<std::size_t>(parent)].end_ns;
    }
    Event e;
    e.name = event_name(r, b, backward_names);
    e.kind = r.kind;
    e.thread = b.thread;
    const std::int64_t from = std::clamp(r.start, lo, hi);
    e.start_ns = from - start;
    e.end_ns = std::clamp(r.end < 0 ? end : r.end, from, hi) - start;
    e.parent = parent;
    if (r.shapes >= 0) e.input_shapes = b.shapes[static_cast<std::size_t>(r.shapes)];
    e.worker = r.worker;
    e.job = r.job;
    e.items = r.items;
    if (r.kind == Event::Kind::PoolChunk && r.first && r.worker > 0) e.wake_latency_ns = r.start - r.publish;
    if (r.kind == Event::Kind::PoolChunk) worker = std::max(worker, r.worker);
    place[i] = static_cast<int>(out.size());
    out.push_back(std::move(e));
  }
  return worker;
}

}  // namespace

// ---- recording ------------------------------------------------------------------------------

namespace detail {

std::uint64_t open(const char* name, Event::Kind kind) {
  Raw r;
  r.name = name;
  r.kind = kind;
  return push_open(r);
}

std::uint64_t open_copy(const std::string& name, Event::Kind kind) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return 0;
  Raw r;
  r.kind = kind;
  {
    std::lock_guard<std::mutex> lock(b->mutex);
    r.copy = static_cast<int>(b->names.size());
    b->names.push_back(name);
  }
  return push_open(r);
}

// The range is usually the innermost open on this thread. Otherwise it was opened on another
// thread (its end goes there, not into this thread's events), or it has already ended with a
// range around it, or its profile has stopped: then nothing is left to close.
void close(std::uint64_t handle) {
  const auto id = static_cast<std::uint32_t>(handle >> 32);
  const auto serial = static_cast<std::uint32_t>(handle);
  if (id != session_id.load(std::memory_order_acquire)) return;
  ThreadBuffer* own = t_state.id == id ? t_state.buffer.get() : nullptr;
  if (own != nullptr && close_in(*own, serial)) return;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    Session& s = session();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (session_id.load(std::memory_order_relaxed) != id) return;
    buffers = s.buffers;
  }
  for (const auto& b : buffers)
    if (b.get() != own && close_in(*b, serial)) return;
}

bool wants_shapes() {
  if (!on()) return false;
  ThreadBuffer* b = buffer();
  if (b == nullptr || !session().record_shapes) return false;
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->open.empty()) return false;
  const Raw& r = b->events[static_cast<std::size_t>(b->open.back())];
  return r.kind == Event::Kind::Op && r.shapes < 0;
}

void set_input_shapes(std::vector<std::vector<std::int64_t>> shapes) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return;
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->open.empty()) return;
  Raw& r = b->events[static_cast<std::size_t>(b->open.back())];
  if (r.kind != Event::Kind::Op || r.shapes >= 0) return;
  r.shapes = static_cast<int>(b->shapes.size());
  b->shapes.push_back(std::move(shapes));
}

}  // namespace detail

RecordFunction::RecordFunction(const std::string& name) {
  if (detail::on()) handle_ = detail::open_copy(name, Event::Kind::Range);
}
RecordFunction::RecordFunction(const char* name) {
  if (detail::on()) handle_ = detail::open_copy(name, Event::Kind::Range);
}
RecordFunction::~RecordFunction() {
  if (handle_ != 0) detail::close(handle_);
}

// ---- the profile ----------------------------------------------------------------------------

Profile::Profile(ProfileOptions options) : options_(options) {
  Session& s = session();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    XGRAD_CHECK(!s.active, "profiler::Profile: another profile is recording; one records at a time");
    s.active = true;
    s.record_shapes = options.record_shapes();
    s.buffers.clear();
    s.serials.store(0, std::memory_order_relaxed);
    session_id.fetch_add(1, std::memory_order_acq_rel);
  }
  num_threads_ = get_num_threads();
  recording_ = true;
  start_ns_ = now_ns();
  detail::recording.store(true);
  buffer();  // this thread is thread 0
  if (options.record_pool()) xgrad::detail::set_pool_observer(&on_pool_event);
}

namespace {
// Ends the session: the threads' buffers, handed over (moved: nothing is allocated).
std::vector<std::shared_ptr<ThreadBuffer>> end_session() {
  Session& s = session();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::shared_ptr<ThreadBuffer>> buffers = std::move(s.buffers);
  s.buffers.clear();
  s.active = false;
  return buffers;
}
}  // namespace

// A profile never stopped ends with its owner and drops its events: collecting them would
// allocate in a destructor (which must not throw).
Profile::~Profile() {
  if (recording_) {
    end_recording();
    end_session();
  }
}

void Profile::end_recording() {
  end_ns_ = now_ns();
  detail::recording.store(false);
  xgrad::detail::set_pool_observer(nullptr);
  recording_ = false;
  num_threads_ = std::max(num_threads_, get_num_threads());
}

void Profile::stop() {
  XGRAD_CHECK(recording_, "profiler::Profile::stop: the profile has already stopped");
  end_recording();
  const std::vector<std::shared_ptr<ThreadBuffer>> buffers = end_session();
  BackwardNames backward_names;
  for (const auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    const int worker = append_thread(*b, start_ns_, end_ns_, backward_names, events_);
    thread_names_.push_back(b->thread == 0 ? "thread 0 (profile)"
                            : worker > 0   ? "pool worker " + std::to_string(worker)
                                           : "thread " + std::to_string(b->thread));
  }
  // Self time: the duration less the op and range events directly inside.
  for (Event& e : events_) e.self_ns = e.duration_ns();
  for (const Event& e : events_)
    if (!is_pool(e.kind) && e.parent >= 0) events_[static_cast<std::size_t>(e.parent)].self_ns -= e.duration_ns();
  // A chunk is named after the op that ran its job ("chunk: gelu").
  std::unordered_map<std::uint64_t, std::string> job_op;
  for (const Event& e : events_)
    if (e.kind == Event::Kind::PoolJob && e.parent >= 0)
      job_op[e.job] = events_[static_cast<std::size_t>(e.parent)].name;
  for (Event& e : events_)
    if (e.kind == Event::Kind::PoolChunk) {
      auto it = job_op.find(e.job);
      if (it != job_op.end()) e.name = "chunk: " + it->second;
    }
}

const std::vector<Event>& Profile::events() const {
  XGRAD_CHECK(!recording_, "profiler::Profile::events: call stop() first");
  return events_;
}

EventList Profile::key_averages(bool group_by_input_shape) const {
  XGRAD_CHECK(!recording_, "profiler::Profile::key_averages: call stop() first");
  std::vector<FunctionEventAvg> rows;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  for (const Event& e : events_) {
    if (is_pool(e.kind)) continue;
    const std::string shapes = group_by_input_shape ? shapes_text(e.input_shapes) : std::string();
    auto [it, fresh] = index.emplace(std::make_pair(e.name, shapes), rows.size());
    if (fresh) {
      rows.emplace_back();
      rows.back().key = e.name;
      rows.back().input_shapes = shapes;
    }
    FunctionEventAvg& row = rows[it->second];
    row.count += 1;
    row.self_cpu_time_total_ns += e.self_ns;
    row.cpu_time_total_ns += e.duration_ns();
  }
  return EventList(std::move(rows), group_by_input_shape);
}

std::vector<WorkerStats> Profile::pool_stats() const {
  XGRAD_CHECK(!recording_, "profiler::Profile::pool_stats: call stop() first");
  int workers = num_threads_;
  for (const Event& e : events_)
    if (e.kind == Event::Kind::PoolChunk) workers = std::max(workers, e.worker + 1);
  std::vector<WorkerStats> stats(static_cast<std::size_t>(workers));
  std::vector<double> latency(static_cast<std::size_t>(workers), 0.0);  // the wake-ups' sum
  for (int w = 0; w < workers; ++w) stats[static_cast<std::size_t>(w)].worker = w;
  for (const Event& e : events_) {
    if (e.kind != Event::Kind::PoolChunk || e.worker < 0) continue;
    WorkerStats& s = stats[static_cast<std::size_t>(e.worker)];
    s.busy_ns += e.duration_ns();
    s.tasks += 1;
    if (e.wake_latency_ns >= 0) {
      s.wakeups += 1;
      latency[static_cast<std::size_t>(e.worker)] += double(e.wake_latency_ns);
      s.max_wake_latency_ns = std::max(s.max_wake_latency_ns, e.wake_latency_ns);
    }
  }
  for (WorkerStats& s : stats) {
    s.idle_ns = std::max<std::int64_t>(0, duration_ns() - s.busy_ns);
    if (s.wakeups) s.mean_wake_latency_ns = latency[static_cast<std::size_t>(s.worker)] / double(s.wakeups);
  }
  return stats;
}

std::string Profile::pool_table() const {
  const std::vector<WorkerStats> stats = pool_stats();
  std::int64_t jobs = 0, job_ns = 0;
  for (const Event& e : events_)
    if (e.kind == Event::Kind::PoolJob) {
      jobs += 1;
      job_ns += e.duration_ns();
    }
  std::ostringstream out;
  out << "Thread pool: " << stats.size() << " threads, " << jobs << " parallel jobs (fork/joins)";
  if (jobs) out << " of " << format_time(double(job_ns) / double(jobs)) << " on average";
  out << ", profile " << format_time(double(duration_ns())) << '\n';
  char line[256];
  std::snprintf(line, sizeof line, "%8s  %12s  %12s  %7s  %8s  %9s  %13s  %13s\n", "worker", "busy", "idle", "busy %",
                "tasks", "wake-ups", "mean wake-up", "max wake-up");
  out << line;
  for (const WorkerStats& s : stats) {
    std::snprintf(line, sizeof line, "%8d  %12s  %12s  %7s  %8lld  %9lld  %13s  %13s\n", s.worker,
                  format_time(double(s.busy_ns)).c_str(), format_time(double(s.idle_ns)).c_str(),
                  format_percent(double(s.busy_ns), double(duration_ns())).c_str(), static_cast<long long>(s.tasks),
                  static_cast<long long>(s.wakeups), s.worker == 0 ? "-" : format_time(s.mean_wake_latency_ns).c_str(),
                  s.worker == 0 ? "-" : format_time(double(s.max_wake_latency_ns)).c_str());
    out << line;
  }
  out << "worker 0 is the thread that published each job (it runs chunks too); a wake-up is a worker's "
         "first chunk of a job, timed from the job's publication\n";
  return out.str();
}

std::string Profile::chrome_trace_json() const {
  XGRAD_CHECK(!recording_, "profiler::Profile::export_chrome_trace: call stop() first");
  std::ostringstream out;
  out << "{\"traceEvents\":[";
  bool first = true;
  const auto sep = [&] {
    if (!first) out << ",\n";
    first = false;
  };
  for (std::size_t t = 0; t < thread_names_.size(); ++t) {
    sep();
    out << "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":" << t << ",\"args\":{\"name\":\""
        << json_escape(thread_names_[t]) << "\"}}";
  }
  const auto us = [](std::int64_t ns) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", double(ns) / 1e3);
    return std::string(buf);
  };
  for (const Event& e : events_) {
    static const char* const kCategory[] = {"op", "backward", "user_annotation", "pool", "pool"};
    sep();
    out << "{\"name\":\"" << json_escape(e.name) << "\",\"cat\":\"" << kCategory[static_cast<int>(e.kind)]
        << "\",\"ph\":\"X\",\"ts\":" << us(e.start_ns) << ",\"dur\":" << us(e.duration_ns())
        << ",\"pid\":1,\"tid\":" << e.thread << ",\"args\":{";
    if (is_pool(e.kind)) {
      out << "\"job\":" << e.job << ",\"worker\":" << e.worker << ",\"items\":" << e.items;
      if (e.wake_latency_ns >= 0) out << ",\"wake-up latency us\":" << us(e.wake_latency_ns);
    } else {
      out << "\"self us\":" << us(e.self_ns);
      if (!e.input_shapes.empty()) out << ",\"Input Shapes\":\"" << shapes_text(e.input_shapes) << '"';
    }
    out << "}}";
  }
  out << "],\"displayTimeUnit\":\"ms\"}\n";
  return out.str();
}

// Through write_file_atomically: a failed export (a full disk, a folder as the path) leaves the
// previous trace as it was, and a FIFO or a device is refused before anything is written (opening
// a FIFO for writing blocked until a reader came).
void Profile::export_chrome_trace(const std::string& path) const {
  const std::string json = chrome_trace_json();
  try {
    write_file_atomically(path, [&](std::ostream& out) { out.write(json.data(), std::streamsize(json.size())); });
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("profiler::Profile::export_chrome_trace: ") + e.what());
  }
}

std::string save_report(Profile& profile, const std::string& path, int row_limit) {
  if (profile.recording()) profile.stop();
  profile.export_chrome_trace(path);
  return profile.key_averages().table("self_cpu_time_total", row_limit) + "\n" + profile.pool_table() +
         "Chrome trace (chrome://tracing, https://ui.perfetto.dev): " + path + "\n";
}

// ---- key_averages' table ---------------------------------------------------------------------

bool EventList::contains(const std::string& key) const {
  return std::any_of(rows_.begin(), rows_.end(), [&](const FunctionEventAvg& r) { return r.key == key; });
}

const FunctionEventAvg& EventList::at(const std::string& key) const {
  for (const FunctionEventAvg& r : rows_)
    if (r.key == key) return r;
  throw std::out_of_range("profiler::EventList::at: no event named '" + key + "'");
}

std::string EventList::table(const std::string& sort_by, int row_limit) const {
  using Key = double (*)(const FunctionEventAvg&);
  Key key = nullptr;
  if (sort_by == "self_cpu_time_total")
    key = [](const FunctionEventAvg& r) { return double(r.self_cpu_time_total_ns); };
  else if (sort_by == "cpu_time_total")
    key = [](const FunctionEventAvg& r) { return double(r.cpu_time_total_ns); };
  else if (sort_by == "cpu_time")
    key = [](const FunctionEventAvg& r) { return r.cpu_time_ns(); };
  else if (sort_by == "count")
    key = [](const FunctionEventAvg& r) { return double(r.count); };
  XGRAD_CHECK(key != nullptr,
              "profiler::EventList::table: sort_by must be self_cpu_time_total, cpu_time_total, "
              "cpu_time or count, got '",
              sort_by, "'");
  std::vector<const FunctionEventAvg*> sorted;
  double self_total = 0;
  for (const FunctionEventAvg& r : rows_) {
    sorted.push_back(&r);
    self_total += double(r.self_cpu_time_total_ns);
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [key](const FunctionEventAvg* a, const FunctionEventAvg* b) { return key(*a) > key(*b); });
  if (row_limit >= 0 && sorted.size() > static_cast<std::size_t>(row_limit))
    sorted.resize(static_cast<std::size_t>(row_limit));

  std::size_t name_width = 4, shapes_width = 12;
  for (const FunctionEventAvg* r : sorted) {
    name_width = std::max(name_width, std::min<std::size_t>(r->key.size(), 55));
    shapes_width = std::max(shapes_width, std::min<std::size_t>(r->input_shapes.size(), 60));
  }
  const auto cut = [](const std::string& s, std::size_t w) { return s.size() <= w ? s : s.substr(0, w - 3) + "..."; };
  std::ostringstream out;
  const auto rule = [&] {
    out << std::string(name_width, '-');
    for (int i = 0; i < 7 - 1; ++i) out << "  " << std::string(12, '-');
    if (by_shape_) out << "  " << std::string(shapes_width, '-');
    out << '\n';
  };
  const auto cells = [&](const std::string& name, const std::vector<std::string>& values, const std::string& shapes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(name_width), cut(name, name_width).c_str());
    out << buf;
    for (const std::string& v : values) {
      std::snprintf(buf, sizeof buf, "  %12s", v.c_str());
      out << buf;
    }
    if (by_shape_) out << "  " << cut(shapes, shapes_width);
    out << '\n';
  };
  rule();
  cells("Name", {"Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"}, "Input Shapes");
  rule();
  for (const FunctionEventAvg* r : sorted)
    cells(r->key,
          {format_percent(double(r->self_cpu_time_total_ns), self_total),
           format_time(double(r->self_cpu_time_total_ns)), format_percent(double(r->cpu_time_total_ns), self_total),
           format_time(double(r->cpu_time_total_ns)), format_time(r->cpu_time_ns()), std::to_string(r->count)},
          r->input_shapes);
  rule();
  out << "Self CPU time total: " << format_time(self_total) << '\n';
  return out.str();
}

}  // namespace xgrad::profiler
