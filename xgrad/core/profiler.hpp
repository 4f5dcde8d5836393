// The profiler, as torch.profiler: while a Profile is recording, every op's forward and backward,
// every record_function range and every chunk the thread pool runs is timed, on every thread.
//
//   xgrad::profiler::Profile prof(xgrad::profiler::ProfileOptions().record_shapes(true));
//   {
//     auto step = xgrad::profiler::record_function("train_step");
//     loss = mse_loss(model.forward(x), y);   // ops: "linear", "layer_norm", ...
//     loss.backward();                        // "backward", in it "MseLossBackward", ...
//     opt.step();                             // "Optimizer.step#Adam.step"
//   }
//   prof.stop();
//   std::cerr << prof.key_averages().table("self_cpu_time_total", 20) << prof.pool_table();
//   prof.export_chrome_trace("trace.json");  // chrome://tracing or https://ui.perfetto.dev
//
// What is recorded:
//   - an op's forward, from its entry to its return, under its name ("linear"): each op opens a
//     range as its first line (an OpScope, ops/op_scope.hpp, or XGRAD_PROFILE_OP where the op
//     has no OpKind); an op that calls ops contains them, so its
//     self time is its total less theirs;
//   - a node's backward under the op's name in CamelCase + "Backward" ("LinearBackward",
//     "LayerNormBackward"), inside a "backward" range per backward pass; autograd::Function ops
//     under their class name;
//   - user ranges: record_function("name"), and the optimizers' step and zero_grad
//     ("Optimizer.step#Adam.step", as torch names them);
//   - with record_pool (the default), each parallel job ("parallel_for", on its caller) and each
//     chunk of it on the thread that ran it, which gives pool_stats(): each worker's busy and idle
//     time, its tasks and its wake-up latency (from the job's publication to the worker starting
//     its first chunk of it).
// Times are wall-clock (steady_clock) on the thread that ran the range, as torch's "CPU time".
//
// Cost: when no profile is recording, an op pays one relaxed atomic load and a branch. While
// recording, each range takes two clock reads and one push into its thread's buffer (about
// 0.1-0.3 us; docs/profiler.md has the overhead measured on a training step).
//
// One Profile records at a time in a process; starting a second while one records throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <xgrad/arg.hpp>

namespace xgrad::profiler {

struct ProfileOptions {
  // The input shapes of each op (torch's record_shapes): key_averages(true) groups by them and
  // the trace shows them.
  XGRAD_ARG(bool, record_shapes) = false;
  // The thread pool's jobs and chunks (pool_stats, pool_table, the workers' rows in the trace).
  XGRAD_ARG(bool, record_pool) = true;
};

// One recorded range. Times are nanoseconds from the start of the profile.
struct Event {
  enum class Kind : std::uint8_t {
    Op,        // an op's forward
    Backward,  // a node's backward
    Range,     // record_function, an optimizer's step, a backward pass
    PoolJob,   // a parallel job, on the thread that published it
    PoolChunk  // one chunk of a job, on the thread that ran it
  };
  std::string name;
  Kind kind = Kind::Op;
  int thread = 0;  // the profile's number for the thread (0: the first seen)
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t self_ns = 0;                             // end - start less the op and range events directly inside
  int parent = -1;                                      // the op or range directly around it (index in events()), or -1
  std::vector<std::vector<std::int64_t>> input_shapes;  // ops, with record_shapes
  // Pool events: the worker (0: the job's caller, 1..n-1: the pool's threads), the job's number,
  // the items in the job or chunk, and for a worker's first chunk of a job its wake-up latency.
  int worker = -1;
  std::uint64_t job = 0;
  std::int64_t items = 0;
  std::int64_t wake_latency_ns = -1;
  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

// One row of key_averages(): every op or range of one name (and input shapes, when grouped).
struct FunctionEventAvg {
  std::string key;
  std::string input_shapes;  // "[[8, 32], [32]]" when grouped by input shape
  std::int64_t count = 0;
  std::int64_t self_cpu_time_total_ns = 0;
  std::int64_t cpu_time_total_ns = 0;
  double cpu_time_ns() const { return count ? double(cpu_time_total_ns) / double(count) : 0.0; }
};

// key_averages(): torch's EventList of averages.
class EventList {
 public:
  explicit EventList(std::vector<FunctionEventAvg> rows, bool by_shape) : rows_(std::move(rows)), by_shape_(by_shape) {}
  const std::vector<FunctionEventAvg>& rows() const { return rows_; }
  // The row of that key (the first, when grouped by shape); throws when absent.
  const FunctionEventAvg& at(const std::string& key) const;
  bool contains(const std::string& key) const;
  // torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, # of Calls
  // (and Input Shapes when grouped by them), sorted by sort_by (descending): "self_cpu_time_total",
  // "cpu_time_total", "cpu_time" (the average) or "count"; at most row_limit rows (< 0: all).
  // The percentages are of the sum of every row's self time, printed last.
  std::string table(const std::string& sort_by = "self_cpu_time_total", int row_limit = 100) const;

 private:
  std::vector<FunctionEventAvg> rows_;
  bool by_shape_;
};

// What one thread of the pool did during the profile.
struct WorkerStats {
  int worker = 0;                   // 0: the callers of the jobs; 1..n-1: the pool's threads
  std::int64_t busy_ns = 0;         // running chunks
  std::int64_t idle_ns = 0;         // the profile's duration less busy_ns
  std::int64_t tasks = 0;           // chunks run
  std::int64_t wakeups = 0;         // jobs it joined (a worker's first chunk of a job)
  double mean_wake_latency_ns = 0;  // from the job's publication to that first chunk
  std::int64_t max_wake_latency_ns = 0;
};

// A profile: records from construction to stop() (or destruction, which drops the events).
class Profile {
 public:
  explicit Profile(ProfileOptions options = ProfileOptions());
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Ends the recording and collects every thread's events (a range still open ends here). Once.
  void stop();
  bool recording() const { return recording_; }

  // After stop(): every event, each thread's in the order the ranges opened.
  const std::vector<Event>& events() const;
  // The op and range events (not the pool's) averaged by name, or by name and input shapes.
  EventList key_averages(bool group_by_input_shape = false) const;
  // One entry per pool thread (get_num_threads() while recording, at least), by worker.
  std::vector<WorkerStats> pool_stats() const;
  // pool_stats() as a table, with the number of jobs and their mean duration.
  std::string pool_table() const;
  // The Trace Event Format JSON that chrome://tracing and Perfetto load: one row per thread
  // (ops, backward, ranges, the pool's jobs and chunks), each complete event ("ph": "X") with its
  // input shapes or its job in "args". Throws std::runtime_error when the file cannot be written.
  void export_chrome_trace(const std::string& path) const;
  std::string chrome_trace_json() const;
  // From construction to stop().
  std::int64_t duration_ns() const { return end_ns_ - start_ns_; }

 private:
  void end_recording();  // stops recording; allocates nothing
  ProfileOptions options_;
  bool recording_ = false;
  std::int64_t start_ns_ = 0, end_ns_ = 0;
  int num_threads_ = 1;
  std::vector<Event> events_;
  std::vector<std::string> thread_names_;
};

// What a program's --profile FILE does at its end: stops `profile` if it still records, writes
// its Chrome trace to `path`, and returns the text to show: key_averages().table() sorted by self
// time (row_limit rows) and the pool's table. Throws when the file cannot be written.
std::string save_report(Profile& profile, const std::string& path, int row_limit = 30);

// A user range, as torch.profiler.record_function: times its scope under `name` while a profile
// records (nothing otherwise).
//   { xgrad::profiler::RecordFunction r("data"); batch = loader.next(); }
class RecordFunction {
 public:
  explicit RecordFunction(const std::string& name);
  explicit RecordFunction(const char* name);
  ~RecordFunction();
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

 private:
  std::uint64_t handle_ = 0;
};

// `auto r = record_function("forward");`: the same, as torch spells it.
inline RecordFunction record_function(const std::string& name) { return RecordFunction(name); }

namespace detail {

extern std::atomic<bool> recording;
inline bool on() { return recording.load(std::memory_order_relaxed); }

// Opens a range on this thread; the handle (0: nothing was opened) closes it. `name` must outlive
// the profile (a string literal or a node's op).
std::uint64_t open(const char* name, Event::Kind kind);
std::uint64_t open_copy(const std::string& name, Event::Kind kind);
void close(std::uint64_t handle);
// make_result's report: the input shapes of the innermost op open on this thread, if it has none.
bool wants_shapes();
void set_input_shapes(std::vector<std::vector<std::int64_t>> shapes);

// XGRAD_PROFILE_OP's range.
class Range {
 public:
  Range(const char* name, Event::Kind kind) {
    if (on()) handle_ = open(name, kind);
  }
  ~Range() {
    if (handle_ != 0) close(handle_);
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  std::uint64_t handle_ = 0;
};

}  // namespace detail
}  // namespace xgrad::profiler

// The first line of an op: times the op's forward under `op` (a string literal) while a profile
// records. Ops that call ops nest.
#define XGRAD_PROFILE_OP(op) \
  const ::xgrad::profiler::detail::Range xgrad_profile_op_range_(op, ::xgrad::profiler::Event::Kind::Op)
