// Helpers shared by the test suites: each op test is a line or two.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace xgrad::testing {

// Restores the thread count (set_num_threads) on scope exit.
class ThreadCountGuard {
 public:
  ThreadCountGuard() : saved_(get_num_threads()) {}
  ~ThreadCountGuard() { set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_;
};

// The parallel jobs (fork/joins) that f() publishes at 2 threads (the pool's observer counts them).
inline int jobs_at_two_threads(const std::function<void()>& f) {
  static std::atomic<int> jobs{0};
  ThreadCountGuard guard;
  set_num_threads(2);
  jobs = 0;
  detail::set_pool_observer([](const detail::PoolEvent& e) {
    if (e.kind == detail::PoolEvent::Kind::Job) jobs.fetch_add(1);
  });
  try {
    f();
  } catch (...) {
    detail::set_pool_observer(nullptr);
    throw;
  }
  detail::set_pool_observer(nullptr);
  return jobs.load();
}

// Standard normal values drawn from Generator(seed), as data (no grad).
template <class T>
Tensor<T> random_data(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  return randn<T>(shape, g, false);
}

// A leaf that requires grad, of standard normal values drawn from Generator(seed).
template <class T>
Tensor<T> random_leaf(const Shape& shape, std::uint64_t seed) {
  Tensor<T> t = random_data<T>(shape, seed);
  t.requires_grad_(true);
  return t;
}

using T64 = Tensor<double>;
using Inputs = std::vector<T64>;

// A 1-D double tensor of the given values.
inline T64 vec(std::vector<double> v, bool requires_grad = true) {
  const std::size_t n = v.size();
  return from_vector<double>(v, {n}, requires_grad);
}

// Random double input of the given shape, requiring grad; values away from 0 when
// `away_from_zero` (for abs, relu, sqrt, log and other kinks).
inline T64 input(const Shape& shape, std::uint64_t seed = 1, bool away_from_zero = false) {
  Generator g(seed);
  T64 t = randn<double>(shape, g, false);
  if (away_from_zero) {
    for (auto& v : t.mutable_value()) v = (v >= 0 ? 0.2 : -0.2) + v;
  }
  t.requires_grad_(true);
  return t;
}

// Positive random input (for log, sqrt, pow with fractional exponents, div denominators).
inline T64 positive_input(const Shape& shape, std::uint64_t seed = 1) {
  Generator g(seed);
  T64 t = rand<double>(shape, g, false);
  for (auto& v : t.mutable_value()) v += 0.5;
  t.requires_grad_(true);
  return t;
}

// The message of the exception f throws; a test failure and "(no exception)" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an exception";
  return "(no exception)";
}

// Asserts that gradcheck passes, printing the report when it does not.
inline void expect_gradcheck(const GradcheckFunction& f, const Inputs& inputs, const GradcheckOptions& options = {}) {
  GradcheckResult r = gradcheck(f, inputs, options);
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_FALSE(r.inputs.empty()) << "no input requires grad: nothing was checked";
}

// Max |a - b| over two arrays of the same shape (fails the test on a shape mismatch).
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  EXPECT_EQ(shape_of(a), shape_of(b));
  double m = 0;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end() && ia != a.end(); ++ia, ++ib) {
    const double x = static_cast<double>(*ia), y = static_cast<double>(*ib);
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;  // equal infinities, or NaN in both
    const double d = std::abs(x - y);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();  // NaN or inf on one side only
    m = std::max(m, d);
  }
  return m;
}

// Expects a call to throw std::invalid_argument whose message contains every fragment.
#define XGRAD_EXPECT_THROW_MSG(statement, ...)                                              \
  do {                                                                                      \
    try {                                                                                   \
      statement;                                                                            \
      ADD_FAILURE() << "expected std::invalid_argument from: " #statement;                 \
    } catch (const std::invalid_argument& e) {                                              \
      for (const char* fragment : {__VA_ARGS__})                                            \
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)                  \
            << "message \"" << e.what() << "\" lacks \"" << fragment << "\"";             \
    }                                                                                       \
  } while (0)

}  // namespace xgrad::testing
