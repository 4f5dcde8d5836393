// The profiler (xgrad/core/profiler.hpp): a training step of a small transformer encoder under it,
// the Chrome trace it writes, its totals against a clock, record_function nesting, the pool's
// workers, and that nothing is recorded when no profile records; ranges closed out of order, names
// of any bytes, and exports that fail (tests/core/test_profiler_threads.cpp: several threads).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/xgrad.hpp>
#include "profile_checks.hpp"
#include "serialize_util.hpp"

namespace {

using namespace xgrad;
namespace prof = xgrad::profiler;
using xgrad::testing::error_of;
using xgrad::testing::event_index;
using xgrad::testing::event_named;
using xgrad::testing::expect_error;
using xgrad::testing::profile_violation;
using xgrad::testing::read_bytes;
using xgrad::testing::TempDir;

struct Step {
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::unique_ptr<optim::Adam<float>> opt;
  Tensor<float> x, target;

  explicit Step(std::size_t d = 32, std::size_t tokens = 16, std::size_t batch = 4) {
    manual_seed(3);
    auto layer =
        std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(std::int64_t(d), 4)
                                                                 .dim_feedforward(std::int64_t(4 * d))
                                                                 .dropout(0.0)
                                                                 .activation("gelu")
                                                                 .batch_first(true)
                                                                 .norm_first(true));
    encoder = std::make_shared<nn::TransformerEncoder<float>>(layer, 2);
    opt = std::make_unique<optim::Adam<float>>(encoder->parameters(), optim::AdamOptions(1e-3));
    x = randn<float>({batch, tokens, d});
    target = randn<float>({batch, tokens, d});
  }
  void run() {
    opt->zero_grad();
    Tensor<float> loss;
    {
      auto r = prof::record_function("forward");
      loss = mse_loss(encoder->forward(x), target);
    }
    loss.backward();
    opt->step();
  }
};

std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

TEST(Profiler, TrainingStepTraceLoadsAsJsonWithForwardAndBackwardOps) {
  Step step;
  step.run();  // warm up
  prof::Profile p(prof::ProfileOptions().record_shapes(true));
  {
    auto r = prof::record_function("train_step");
    step.run();
  }
  p.stop();
  const std::string path = temp_path("xgrad_profiler_trace.json");
  p.export_chrome_trace(path);
  const nlohmann::json trace = load_json(path);
  std::remove(path.c_str());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::multiset<std::string> names;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ASSERT_EQ(e["ph"], "X");
    for (const char* field : {"name", "ts", "dur", "pid", "tid", "args"}) ASSERT_TRUE(e.contains(field)) << e;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    names.insert(e["name"].get<std::string>());
  }
  for (const char* op : {"linear", "layer_norm", "linear_gelu", "attention_heads", "add", "mse_loss", "LinearBackward",
                         "LayerNormBackward", "LinearGeluBackward", "ScaledDotProductAttentionBackward", "AddBackward",
                         "MseLossBackward", "add_layer_norm", "AddLayerNormBackward", "backward", "forward",
                         "train_step", "Optimizer.step#Adam.step", "Optimizer.zero_grad#Adam.zero_grad"})
    EXPECT_TRUE(names.count(op)) << op << " missing from the trace";
  // Two pre-norm layers: norm1 a layer_norm, norm2 fused with the residual add before it
  // (add_layer_norm, whose backward shows three times: the fused kernel's node and its two outputs,
  // s and y, handing it their gradients); the linear layers (in-projection, out-projection, two
  // feed-forward: linear1 and the GELU fused, ops/linear_gelu.hpp) per layer, each with a backward.
  EXPECT_EQ(names.count("layer_norm"), 2u);
  EXPECT_EQ(names.count("LayerNormBackward"), 2u);
  EXPECT_EQ(names.count("add_layer_norm"), 2u);
  EXPECT_EQ(names.count("AddLayerNormBackward"), 6u);
  EXPECT_EQ(names.count("linear_gelu"), 2u);
  EXPECT_EQ(names.count("LinearGeluBackward"), 2u);
  // The input shapes (record_shapes) of the loss: input and target.
  bool shaped = false;
  for (const auto& e : trace["traceEvents"])
    if (e["name"] == "mse_loss") shaped = e["args"]["Input Shapes"] == "[[4, 16, 32], [4, 16, 32]]";
  EXPECT_TRUE(shaped);
  const prof::EventList by_shape = p.key_averages(/*group_by_input_shape=*/true);
  EXPECT_EQ(by_shape.at("mse_loss").input_shapes, "[[4, 16, 32], [4, 16, 32]]");
}

TEST(Profiler, RangesNestAndSelfTimeIsTotalLessChildren) {
  Step step;
  prof::Profile p;
  {
    auto outer = prof::record_function("outer");
    {
      auto inner = prof::record_function("inner");
      step.run();
    }
  }
  p.stop();
  const auto& events = p.events();
  int outer = -1, inner = -1;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i].name == "outer") outer = int(i);
    if (events[i].name == "inner") inner = int(i);
  }
  ASSERT_GE(outer, 0);
  ASSERT_GE(inner, 0);
  EXPECT_EQ(events[std::size_t(outer)].parent, -1);
  EXPECT_EQ(events[std::size_t(inner)].parent, outer);
  // forward is inside inner, linear inside forward, and every op and range's self <= total; the
  // children's totals plus the self time make the total.
  std::map<int, std::int64_t> children;
  for (const auto& e : events) {
    if (e.kind == prof::Event::Kind::PoolJob || e.kind == prof::Event::Kind::PoolChunk) continue;
    EXPECT_LE(e.self_ns, e.duration_ns()) << e.name;
    EXPECT_GE(e.self_ns, 0) << e.name;
    if (e.parent >= 0) {
      const auto& parent = events[std::size_t(e.parent)];
      EXPECT_LE(parent.start_ns, e.start_ns) << e.name << " in " << parent.name;
      EXPECT_GE(parent.end_ns, e.end_ns) << e.name << " in " << parent.name;
      children[e.parent] += e.duration_ns();
    }
    if (e.name == "forward") {
      EXPECT_EQ(e.parent, inner);
    }
  }
  for (const auto& [i, sum] : children)
    EXPECT_EQ(events[std::size_t(i)].self_ns + sum, events[std::size_t(i)].duration_ns());
  const prof::EventList avg = p.key_averages();
  EXPECT_LT(avg.at("inner").self_cpu_time_total_ns, avg.at("inner").cpu_time_total_ns);
  EXPECT_EQ(avg.at("layer_norm").count, 2);
  EXPECT_EQ(avg.at("add_layer_norm").count, 2);
  const std::string table = avg.table("cpu_time_total", 5);
  EXPECT_NE(table.find("Self CPU %"), std::string::npos);
  EXPECT_NE(table.find("# of Calls"), std::string::npos);
  EXPECT_NE(table.find("outer"), std::string::npos);  // the longest total comes first
  EXPECT_THROW(avg.table("bogus"), std::invalid_argument);
}

// The profiler's own accounting against a clock: the top-level events of the profiled thread
// cover the measured wall time of the region within 10%, and their self times add up to it.
TEST(Profiler, TotalsMatchTheMeasuredWallTime) {
  Step step(48, 32, 8);
  step.run();
  for (int attempt = 0; attempt < 3; ++attempt) {
    prof::Profile p;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) {
      auto r = prof::record_function("train_step");
      step.run();
    }
    const auto t1 = std::chrono::steady_clock::now();
    p.stop();
    const double wall = double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    double top = 0, self = 0, ops_self = 0;
    for (const auto& e : p.events()) {
      if (e.thread != 0 || e.kind == prof::Event::Kind::PoolJob || e.kind == prof::Event::Kind::PoolChunk) continue;
      if (e.parent < 0) top += double(e.duration_ns());
      self += double(e.self_ns);
      if (e.kind != prof::Event::Kind::Range) ops_self += double(e.self_ns);
    }
    EXPECT_NEAR(self, top, 1e-6 * top);
    EXPECT_LE(top, wall);
    EXPECT_GT(ops_self, 0.0);
    if (top >= 0.9 * wall) return;  // a preempted run gets another chance
    ADD_FAILURE_AT(__FILE__, __LINE__) << "attempt " << attempt << ": top-level total " << top << " ns of wall " << wall
                                       << " ns";
  }
}

TEST(Profiler, RecordsNothingWhenOff) {
  Step step;
  step.run();
  {
    prof::Profile p;
    p.stop();
    step.run();  // after stop: not recorded
    EXPECT_TRUE(p.events().empty() || p.events().size() == 0u);
    EXPECT_TRUE(p.key_averages().rows().empty());
  }
  // Ranges opened with no profile recording are ignored, also when one starts before they close.
  auto r = prof::record_function("before");
  prof::Profile p;
  step.run();
  p.stop();
  for (const auto& e : p.events()) EXPECT_NE(e.name, "before");
  EXPECT_FALSE(p.events().empty());
  EXPECT_FALSE(prof::detail::on());
}

TEST(Profiler, OneProfileAtATime) {
  prof::Profile p;
  EXPECT_THROW(prof::Profile second, std::invalid_argument);
  p.stop();
  EXPECT_THROW(p.stop(), std::invalid_argument);
  prof::Profile third;  // after stop, a new one may start
}

TEST(Profiler, PoolStatsShowEachWorker) {
  const int before = get_num_threads();
  set_num_threads(2);
  Step step(64, 64, 8);
  step.run();
  prof::Profile p;
  for (int i = 0; i < 2; ++i) step.run();
  p.stop();
  set_num_threads(before);
  const auto stats = p.pool_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].worker, 0);
  EXPECT_EQ(stats[1].worker, 1);
  EXPECT_GT(stats[0].tasks, 0);
  EXPECT_GT(stats[1].tasks, 0);
  EXPECT_GT(stats[1].wakeups, 0);
  EXPECT_GE(stats[1].mean_wake_latency_ns, 0.0);
  EXPECT_GE(double(stats[1].max_wake_latency_ns), stats[1].mean_wake_latency_ns);
  for (const auto& s : stats) EXPECT_EQ(s.busy_ns + s.idle_ns, p.duration_ns());
  // The chunks run on worker 1's own row of the trace, named after the op that split its work.
  const nlohmann::json trace = nlohmann::json::parse(p.chrome_trace_json());
  std::set<int> chunk_threads;
  bool named = false, worker_row = false;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["args"]["name"] == "pool worker 1") worker_row = true;
    if (e["ph"] != "X" || e["cat"] != "pool" || e["name"] == "parallel_for") continue;
    chunk_threads.insert(e["tid"].get<int>());
    named = named || e["name"] == "chunk: linear" || e["name"] == "chunk: LinearBackward";
  }
  EXPECT_GE(chunk_threads.size(), 2u);
  EXPECT_TRUE(named);
  EXPECT_TRUE(worker_row);
  EXPECT_NE(p.pool_table().find("wake-up"), std::string::npos);
}

// A user op (autograd::Function) is named after its class, its backward too.
struct Square : autograd::Function<Square> {
  static Tensor<float> forward(autograd::AutogradContext<float>* ctx, Tensor<float> x) {
    ctx->save_for_backward({x});
    return Tensor<float>(Array<float>(x.value() * x.value()));
  }
  static std::vector<Tensor<float>> backward(autograd::AutogradContext<float>* ctx, std::vector<Tensor<float>> g) {
    const Array<float>& x = ctx->get_saved_variables()[0].value();
    return {Tensor<float>(Array<float>(2.0f * x * g[0].value()))};
  }
};

TEST(Profiler, CustomFunctionIsNamedAfterItsClass) {
  Tensor<float> x = randn<float>({4, 8}, /*requires_grad=*/true);
  prof::Profile p;
  Tensor<float> y = sum(Square::apply(x));
  y.backward();
  p.stop();
  const prof::EventList avg = p.key_averages();
  ASSERT_TRUE(avg.contains("(anonymous namespace)::Square")) << avg.table();
  EXPECT_TRUE(avg.contains("(anonymous namespace)::SquareBackward"));
  EXPECT_TRUE(avg.contains("SumBackward"));
  for (const auto& row : avg.rows()) EXPECT_LE(row.self_cpu_time_total_ns, row.cpu_time_total_ns) << row.key;
}

TEST(Profiler, ExportToAnUnwritablePathThrows) {
  prof::Profile p;
  p.stop();
  EXPECT_THROW(p.export_chrome_trace("/nonexistent-dir/trace.json"), std::runtime_error);
}

// A FIFO as the trace's path is refused at once, naming it, and stays a FIFO: opening it for
// writing used to block until a reader came (forever, in a program writing its trace at exit).
TEST(Profiler, ExportToAFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  const std::string fifo = dir.file("trace.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  prof::Profile p;
  p.stop();
  auto exported = std::async(std::launch::async, [&] { return error_of([&] { p.export_chrome_trace(fifo); }); });
  if (exported.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // releases the writer, so that the test ends
    exported.wait();
    ::close(reader);
    FAIL() << "export_chrome_trace to a FIFO blocked for 5 s";
  }
  const std::string message = exported.get();
  for (const std::string& fragment : {std::string("export_chrome_trace"), fifo, std::string("a FIFO")})
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// An export that fails halfway (a file size limit, as a full disk would) or cannot replace its
// path (a folder) leaves the previous trace byte for byte: it used to be truncated first, then
// half overwritten.
TEST(Profiler, FailedExportLeavesThePreviousTrace) {
  TempDir dir;
  const std::string path = dir.file("trace.json");
  {
    prof::Profile small;
    { auto r = prof::record_function("small"); }
    small.stop();
    small.export_chrome_trace(path);
  }
  const std::string previous = read_bytes(path);
  prof::Profile big;
  for (int i = 0; i < 2000; ++i) {
    auto r = prof::record_function(std::string(64, 'x'));
  }
  big.stop();
  ASSERT_GT(big.chrome_trace_json().size(), 4u * 64 * 1024);

  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  rlimit limited = original;
  limited.rlim_cur = 64 * 1024;
  auto* previous_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  const std::string message = error_of([&] { big.export_chrome_trace(path); });
  ::setrlimit(RLIMIT_FSIZE, &original);
  ::signal(SIGXFSZ, previous_handler);
  for (const std::string& fragment : {std::string("export_chrome_trace"), path, std::string(std::strerror(EFBIG))})
    EXPECT_NE(message.find(fragment), std::string::npos) << message;
  EXPECT_TRUE(read_bytes(path) == previous) << "the previous trace was changed";
  EXPECT_EQ(dir.entries(), std::set<std::string>{"trace.json"});  // no temporary file left

  std::filesystem::create_directory(dir.file("folder"));
  expect_error<std::runtime_error>([&] { big.export_chrome_trace(dir.file("folder")); },
                                   {"export_chrome_trace", dir.file("folder")});
  // The export that can go through replaces the trace.
  big.export_chrome_trace(path);
  EXPECT_EQ(load_json(path)["traceEvents"].size(), 2000u + 1);  // and thread 0's name
}

// RAII misused: a range closed while ranges opened inside it are still open. Closing a range ends
// them with it (their own closes, later, are ignored), as leaving a scope ends the scopes inside
// it: every event stays inside its parent and no self time is negative. The outer range's self
// time used to be negative, the inner one outlasting it.
TEST(Profiler, ClosingARangeEndsTheRangesOpenedInsideIt) {
  prof::Profile p;
  auto outer = std::make_unique<prof::RecordFunction>("outer");
  auto middle = std::make_unique<prof::RecordFunction>("middle");
  auto inner = std::make_unique<prof::RecordFunction>("inner");
  const std::uint64_t op = prof::detail::open("op", prof::Event::Kind::Op);  // as XGRAD_PROFILE_OP opens one
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  middle.reset();  // ends inner and op too
  { auto after = prof::record_function("after"); }
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  inner.reset();
  prof::detail::close(op);
  outer.reset();
  p.stop();
  EXPECT_EQ(profile_violation(p), "");
  const int o = event_index(p, "outer"), m = event_index(p, "middle");
  EXPECT_EQ(event_named(p, "middle").parent, o);
  EXPECT_EQ(event_named(p, "inner").parent, m);
  EXPECT_EQ(event_named(p, "inner").end_ns, event_named(p, "middle").end_ns);
  EXPECT_EQ(event_named(p, "op").end_ns, event_named(p, "middle").end_ns);
  EXPECT_EQ(event_named(p, "after").parent, o);
  EXPECT_GE(event_named(p, "after").start_ns, event_named(p, "middle").end_ns);
  EXPECT_EQ(p.events().size(), 5u);
}

// Names of any bytes give a trace that parses: quotes, backslashes and control characters are
// escaped, and each malformed UTF-8 sequence becomes one U+FFFD (as Python's errors="replace"
// does). A byte such as 0xFF used to go into the trace as it was, which no JSON parser loads.
TEST(Profiler, TraceIsJsonWhateverTheNames) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::vector<std::pair<std::string, std::string>> names = {
      {"quote \" backslash \\ slash / brace }", ""},
      {std::string("nul \0, \x01, \x1f, \n, \t, \x7f", 20), ""},
      {"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf", ""},  // 2 to 4 bytes, U+10FFFF
      {"a\xff", "a" + r},
      {"\x80 stray continuation", r + " stray continuation"},
      {"\xc0\xaf overlong", r + r + " overlong"},
      {"\xe0\x80\xaf overlong", r + r + r + " overlong"},
      {"\xed\xa0\x80 surrogate", r + r + r + " surrogate"},
      {"\xf4\x90\x80\x80 past U+10FFFF", r + r + r + r + " past U+10FFFF"},
      {"\xf5\xfe\xff", r + r + r},
      {"\xe2\x82 cut", r + " cut"},
      {"cut \xf0\x9f\x98", "cut " + r},
  };
  prof::Profile p;
  for (const auto& name : names) prof::RecordFunction range(name.first);
  p.stop();
  EXPECT_EQ(profile_violation(p), "");
  TempDir dir;
  p.export_chrome_trace(dir.file("trace.json"));
  const nlohmann::json trace = load_json(dir.file("trace.json"));
  std::vector<std::string> shown;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") shown.push_back(e["name"].get<std::string>());
  ASSERT_EQ(shown.size(), names.size());
  for (std::size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(shown[i], names[i].second.empty() ? names[i].first : names[i].second) << "name " << i;
  EXPECT_EQ(p.key_averages().at("a\xff").count, 1);  // the events keep the bytes
}

}  // namespace
