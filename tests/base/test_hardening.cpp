// What a hostile or careless caller meets: shapes whose element count overflows or
// cannot be allocated are refused by name; the default generator may be shared by threads;
// set_num_threads is all or nothing when threads cannot be created.
#include "address_space_limit.hpp"
#include "test_util.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <dirent.h>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <xgrad/nn/nn.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

#define EXPECT_MESSAGE(f, ...)                                               \
  do {                                                                       \
    const std::string m_ = error_of([&] { f; });                           \
    for (const char* part : {__VA_ARGS__}) EXPECT_NE(m_.find(part), std::string::npos) << m_; \
  } while (0)

constexpr std::size_t k62 = std::size_t{1} << 62;

}  // namespace

// ---- element counts -------------------------------------------------------------------------------

TEST(ElementCount, FactoriesRefuseShapesThatOverflowOrCannotBeAllocated) {
  // Shapes whose element count once wrapped: numel 2^64 became 0.
  EXPECT_MESSAGE(zeros<float>({k62, 4}), "zeros: the shape (4611686018427387904, 4) has too many elements");
  EXPECT_MESSAGE(ones<double>({std::size_t{1} << 32, std::size_t{1} << 32}), "ones: the shape (4294967296, 4294967296)",
                 "too many elements");
  EXPECT_MESSAGE(full<float>({3, k62, 5}, 1.f), "full: the shape (3, 4611686018427387904, 5)");
  EXPECT_MESSAGE(rand<float>({k62, 8}), "rand: the shape");
  EXPECT_MESSAGE(randn<double>({k62, 8}), "randn: the shape");
  EXPECT_MESSAGE(from_vector<float>({1, 2, 3, 4}, {k62 + 1, 4}), "from_vector: the shape (4611686018427387905, 4)");
  // A count that fits but whose bytes do not: 2^61 doubles are 2^64 bytes.
  EXPECT_MESSAGE(zeros<double>({std::size_t{1} << 61}), "zeros: the shape (2305843009213693952) has",
                 "more than can be allocated");
  // Zero elements, but the other sizes still overflow xtensor's strides.
  EXPECT_MESSAGE(zeros<float>({0, k62, 8}), "too many elements");
  // What fits is fine.
  EXPECT_EQ(zeros<float>({0, std::size_t{1} << 40}).numel(), 0);
  EXPECT_EQ(checked_numel(Shape{2, 3, 4}, 8, "x"), 24u);
}

TEST(ElementCount, ReshapeAndExpandRefuseOverflowingShapes) {
  auto x = from_vector<float>({1, 2, 3, 4}, {4}, true);
  // (2^62 + 1) * 4 wraps to 4 = x.numel(): it used to be accepted.
  EXPECT_MESSAGE(reshape(x, {static_cast<std::int64_t>(k62 + 1), 4}), "reshape: the shape (4611686018427387905, 4)");
  EXPECT_MESSAGE(view(x, {static_cast<std::int64_t>(k62 + 1), -1, 4}),
                 "reshape: the shape (4611686018427387905, -1, 4) has too many elements");
  EXPECT_MESSAGE(expand(x, {static_cast<std::int64_t>(k62), 4}), "expand: the shape (4611686018427387904, 4)",
                 "too many elements");
  EXPECT_EQ(reshape(x, {2, -1}).shape(), (Shape{2, 2}));
  EXPECT_EQ(expand(x, {3, 4}).numel(), 12);
}

// ---- the default generator ---------------------------------------------------------------------------

TEST(DefaultGenerator, ThreadsBuildingModulesGetDifferentWeightsFromTheOneStream) {
  // Serially, two Linear(256, 256) draw one stream; built at once on two threads, each tensor
  // takes a contiguous run of the same stream: the same values overall (the bias bound differs
  // from the weight bound in the last bit, hence the tolerance), and never the same weights.
  auto values = [](const nn::Linear<double>& l, std::vector<double>& out) {
    out.insert(out.end(), l.weight.value().begin(), l.weight.value().end());
    out.insert(out.end(), l.bias.value().begin(), l.bias.value().end());
  };
  for (std::uint64_t trial = 0; trial < 8; ++trial) {
    SCOPED_TRACE(trial);
    manual_seed(trial);
    std::vector<double> serial;
    {
      nn::Linear<double> a(256, 256), b(256, 256);
      values(a, serial);
      values(b, serial);
    }
    manual_seed(trial);
    std::optional<nn::Linear<double>> la, lb;
    std::atomic<int> ready{0};
    auto build = [&](std::optional<nn::Linear<double>>& slot) {
      ++ready;
      while (ready.load() < 2) {
      }
      slot.emplace(256, 256);
    };
    std::thread t1(build, std::ref(la)), t2(build, std::ref(lb));
    t1.join();
    t2.join();
    EXPECT_NE(la->weight.value(), lb->weight.value());
    std::vector<double> concurrent;
    values(*la, concurrent);
    values(*lb, concurrent);
    std::sort(serial.begin(), serial.end());
    std::sort(concurrent.begin(), concurrent.end());
    ASSERT_EQ(serial.size(), concurrent.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < serial.size(); ++i) differ += std::abs(serial[i] - concurrent[i]) > 1e-15;
    EXPECT_EQ(differ, 0u);
  }
}

TEST(DefaultGenerator, ManualSeedWhileAnotherThreadDrawsIsSafe) {
  // A reseed lands between two tensors' draws, never inside one: every tensor drawn is one of
  // the 64-number blocks of seed 42's stream.
  constexpr int kTensors = 300;
  manual_seed(42);
  const Array<double> stream = rand<double>({kTensors, 64}).value();
  std::atomic<bool> stop{false};
  std::atomic<long> reseeds{0};
  std::thread seeder([&] {
    while (!stop.load()) {
      manual_seed(42);
      ++reseeds;
    }
  });
  while (reseeds.load() == 0) {
  }
  int matched = 0;
  for (int i = 0; i < kTensors; ++i) {
    const Array<double> t = rand<double>({64}).value();
    for (int k = 0; k < kTensors; ++k)
      if (std::equal(t.begin(), t.end(), stream.data() + 64 * k)) {
        ++matched;
        break;
      }
  }
  stop = true;
  seeder.join();
  EXPECT_EQ(matched, kTensors);
  EXPECT_GT(reseeds.load(), 1);
}

// Calls `draw` 2 * n times on the default generator seeded with 7: in turn on one thread, then n
// times on each of two threads at once. Returns both lists of results, sorted.
using Draws = std::vector<std::vector<double>>;
std::pair<Draws, Draws> draws_in_turn_and_at_once(const std::function<Array<double>()>& draw, int n) {
  const auto flat = [](const Array<double>& a) { return std::vector<double>(a.begin(), a.end()); };
  Draws serial, a, b;
  manual_seed(7);
  for (int i = 0; i < 2 * n; ++i) serial.push_back(flat(draw()));
  manual_seed(7);
  std::atomic<int> ready{0};
  auto run = [&](Draws& out) {
    ++ready;
    while (ready.load() < 2) {
    }
    for (int i = 0; i < n; ++i) out.push_back(flat(draw()));
  };
  std::thread t1(run, std::ref(a)), t2(run, std::ref(b));
  t1.join();
  t2.join();
  a.insert(a.end(), b.begin(), b.end());
  std::sort(serial.begin(), serial.end());
  std::sort(a.begin(), a.end());
  return {serial, a};
}

// Dropout's mask, and attention's dropout on its probabilities, take a contiguous run of the
// stream while they hold the generator's lock: two threads drawing at once get between them the
// same results as one thread drawing in turn. (ctest -L threads runs this under ThreadSanitizer.)
TEST(DefaultGenerator, DropoutOnTwoThreadsAtOnceTakesRunsOfTheOneStream) {
  const auto x = ones<double>({64, 64});
  const auto [serial, concurrent] = draws_in_turn_and_at_once([&] { return dropout(x, 0.5).value(); }, 50);
  EXPECT_EQ(serial, concurrent);
}

TEST(DefaultGenerator, AttentionDropoutOnTwoThreadsAtOnceTakesRunsOfTheOneStream) {
  manual_seed(1);
  const auto q = randn<double>({2, 2, 8, 4}), k = randn<double>({2, 2, 8, 4}), v = randn<double>({2, 2, 8, 4});
  const auto [serial, concurrent] =
      draws_in_turn_and_at_once([&] { return scaled_dot_product_attention(q, k, v, {}, 0.5).value(); }, 20);
  EXPECT_EQ(serial, concurrent);
}

// ---- set_num_threads ---------------------------------------------------------------------------------

namespace {

std::size_t live_threads() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

std::atomic<int> fail_from{1 << 30};
void failing_start(int worker) {
  if (worker >= fail_from.load()) throw std::system_error(EAGAIN, std::generic_category(), "pthread_create");
}

struct HookGuard {
  explicit HookGuard(int from) {
    fail_from = from;
    detail::set_thread_start_hook(&failing_start);
  }
  ~HookGuard() { detail::set_thread_start_hook(nullptr); }
};

// The pool's threads all take part: a sum over many chunks comes out right.
void expect_pool_works() {
  std::vector<double> v(1 << 16, 1.0);
  std::atomic<long> total{0};
  detail::parallel_for(v.size(), 64, [&](std::size_t b, std::size_t e) { total += static_cast<long>(e - b); });
  EXPECT_EQ(total.load(), 1 << 16);
}

}  // namespace

TEST(SetNumThreads, FailedThreadCreationRollsBackToThePreviousPool) {
  const int before = get_num_threads();
  set_num_threads(3);
  const std::size_t threads_with_3 = live_threads();
  {
    HookGuard fail(3);  // workers 1 and 2 start (enough for the previous 3 threads), worker 3 fails
    EXPECT_MESSAGE(set_num_threads(100), "set_num_threads(100): started 2 of the 99 worker threads",
                   "Resource temporarily unavailable", "kept the previous 3 threads");
  }
  EXPECT_EQ(get_num_threads(), 3);
  EXPECT_EQ(live_threads(), threads_with_3);
  expect_pool_works();
  set_num_threads(before);
}

TEST(SetNumThreads, WhenEvenThePreviousPoolCannotRestartItRunsOnOneThread) {
  const int before = get_num_threads();
  set_num_threads(3);
  const std::size_t threads_with_3 = live_threads();
  {
    HookGuard fail(1);  // no thread starts at all
    EXPECT_MESSAGE(set_num_threads(8), "set_num_threads(8): started 0 of the 7 worker threads",
                   "nor restart the previous 3 threads; running on 1 thread");
    EXPECT_EQ(get_num_threads(), 1);
    EXPECT_EQ(live_threads(), threads_with_3 - 2);
    expect_pool_works();
  }
  set_num_threads(before);
  EXPECT_EQ(get_num_threads(), before);
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(SetNumThreads, RealThreadCreationFailureUnderAnAddressSpaceLimit) {
  // Without hooks: an address-space limit a little above what the process maps leaves room
  // for a few 8 MiB thread stacks, not for 1000. (Sanitizers map terabytes: skipped there.)
  const int before = get_num_threads();
  set_num_threads(2);
  xgrad::testing::AddressSpaceLimit limit(std::size_t{64} << 20);
  limit.apply();  // first joins OpenBLAS's own server threads (address_space_limit.hpp)
  const std::size_t threads_with_2 = live_threads();
  const std::string m = error_of([] { set_num_threads(1000); });
  limit.lift();
  EXPECT_NE(m.find("set_num_threads(1000)"), std::string::npos) << m;
  EXPECT_NE(m.find("kept the previous 2 threads"), std::string::npos) << m;
  EXPECT_EQ(get_num_threads(), 2);
  EXPECT_EQ(live_threads(), threads_with_2);
  expect_pool_works();
  set_num_threads(before);
}
#endif

// ---- memory that cannot be had, warnings, zero-size layers ------------------------------------------

namespace {

// An allocation no machine can serve: 2^45 floats or doubles are 128 or 256 TiB, beyond the 47-bit
// user address space, so it fails whatever the overcommit policy.
constexpr std::size_t k45 = std::size_t{1} << 45;

template <class F>
std::string out_of_memory_message(F&& f) {
  try {
    f();
  } catch (const OutOfMemoryError& e) {
    const std::bad_alloc& as_bad_alloc = e;  // what a caller catching std::bad_alloc gets
    return as_bad_alloc.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected OutOfMemoryError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected OutOfMemoryError";
  return "";
}

#define EXPECT_OUT_OF_MEMORY(f, ...)                                            \
  do {                                                                          \
    const std::string m_ = out_of_memory_message([&] { f; });                   \
    for (const char* part : {__VA_ARGS__})                                      \
      EXPECT_NE(m_.find(part), std::string::npos) << "\"" << m_ << "\" lacks \"" << part << "\""; \
  } while (0)

}  // namespace

// The sanitizers' operator new reports a failed allocation and aborts instead of throwing
// std::bad_alloc, whatever their options: this runs in the plain build only.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(Hardening, AllocationsTooLargeForTheMachineNameTheOpShapeAndBytes) {
  EXPECT_OUT_OF_MEMORY(zeros<float>({k45}), "zeros: not enough memory for a tensor of shape (35184372088832)",
                       "140737488355328 bytes");
  EXPECT_OUT_OF_MEMORY(arange<double>(0.0, 3e13), "arange: not enough memory", "(30000000000000)",
                       "240000000000000 bytes");
  EXPECT_OUT_OF_MEMORY(expand(ones<float>({1}), {static_cast<std::int64_t>(k45)}),
                       "expand: not enough memory for a tensor of shape (35184372088832)");
  // A broadcast of two tensors the machine holds to one it cannot: (2^23, 1) + (2^22).
  const Tensor<float> a = zeros<float>({std::size_t{1} << 23, 1}), b = zeros<float>({std::size_t{1} << 22});
  EXPECT_OUT_OF_MEMORY(a + b, "not enough memory for a tensor of shape (8388608, 4194304)", "140737488355328 bytes");
  // The library still works afterwards.
  EXPECT_EQ(sum(ones<float>({3})).item(), 3.0f);
}
#endif

TEST(Hardening, ReductionOutputShapesAreChecked) {
  // (2^62, 0) has no element; its sum over dim 1 would have 2^62.
  const Tensor<float> x = zeros<float>({std::size_t{1} << 62, 0});
  EXPECT_MESSAGE(sum(x, {1}), "sum: the shape (4611686018427387904)", "more than can be allocated");
  EXPECT_MESSAGE(amax(x, {1}), "amax: the shape (4611686018427387904)");
  EXPECT_MESSAGE(mean(x, {1}), "mean: the shape (4611686018427387904)");
  EXPECT_EQ(sum(x).item(), 0.0f);  // over everything: one number
}

namespace {

// Collects the warnings raised while it lives, each call site afresh.
class WarningCapture {
 public:
  WarningCapture() : previous_(set_warning_handler([this](const Warning& w) { messages.push_back(w.message); })) {
    reset_warnings();
  }
  ~WarningCapture() { set_warning_handler(previous_); }
  std::vector<std::string> messages;

 private:
  WarningHandler previous_;
};

}  // namespace

TEST(Warnings, MseLossWarnsOncePerCallSiteWhenTheTargetBroadcasts) {
  WarningCapture warnings;
  const Tensor<float> input = ones<float>({3, 1}), target = ones<float>({3});
  EXPECT_EQ(mse_loss(input, target).shape(), Shape{});  // broadcast to (3, 3), as PyTorch
  ASSERT_EQ(warnings.messages.size(), 1u);
  EXPECT_NE(warnings.messages[0].find("using a target size (3) that is different to the input size (3, 1)"),
            std::string::npos)
      << warnings.messages[0];
  mse_loss(input, target);  // the same call site: once
  mse_loss(input, input);   // the same shapes: no warning
  EXPECT_EQ(warnings.messages.size(), 1u);
  reset_warnings();
  mse_loss(input, target);
  EXPECT_EQ(warnings.messages.size(), 2u);
}

TEST(Warnings, DefaultHandlerPrintsToStderrAndAThrowingHandlerMakesAnError) {
  reset_warnings();
  ::testing::internal::CaptureStderr();
  mse_loss(ones<double>({2, 1}), ones<double>({2}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("xgrad warning: mse_loss: using a target size (2)"), std::string::npos) << err;
  EXPECT_NE(err.find("loss.cpp:"), std::string::npos) << err;  // where it was raised

  reset_warnings();
  const WarningHandler previous =
      set_warning_handler([](const Warning& w) { throw std::runtime_error("as error: " + w.message); });
  EXPECT_THROW(mse_loss(ones<double>({2, 1}), ones<double>({2})), std::runtime_error);
  set_warning_handler(previous);
}

TEST(Hardening, ZeroSizeLayersAreAcceptedAsInPyTorch) {
  WarningCapture warnings;
  nn::Linear<float> empty_in(0, 3);  // weight (3, 0): its init is a no-op, with PyTorch's warning
  EXPECT_EQ(empty_in.weight.shape(), (Shape{3, 0}));
  const Tensor<float> y = empty_in.forward(zeros<float>({2, 0}));
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(y.value()(i, j), empty_in.bias.value()(j));
  for (float b : empty_in.bias.value()) EXPECT_EQ(b, 0.0f);  // bound 1/sqrt(fan_in) is 0 at fan_in 0
  ASSERT_FALSE(warnings.messages.empty());
  EXPECT_NE(warnings.messages[0].find("zero-element tensors is a no-op"), std::string::npos);

  nn::TransformerEncoderLayer<float> no_ff(nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(0).dropout(0.0));
  const Tensor<float> x = ones<float>({4, 1, 8});
  EXPECT_EQ(no_ff.forward(x).shape(), (Shape{4, 1, 8}));
}
