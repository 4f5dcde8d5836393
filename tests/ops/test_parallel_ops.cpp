// The memory-bound ops on the pool (backend/parallel_loops.hpp): pointwise maps and their
// backwards, broadcasting binary ops, sum_to, gradient accumulation, reductions, gathers and the
// embedding's scatter. For each, at sizes below and above the 64K-element grain: the values and
// gradients are bit for bit the same at 1, 2 and 3 threads; the large sizes run as parallel jobs
// and the small ones do not fork; folds split by output give the serial walk's result exactly.
#include <atomic>
#include <cstring>
#include <functional>
#include <set>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

using F32 = Tensor<float>;
using Arrays = std::vector<Array<float>>;

// Sizes: below the grain, and above it with ragged blocks and rows.
const Shape kSmall{3, 5, 7};
const Shape kLarge{5, 67, 211};  // 70,685 elements

F32 leaf(const Shape& shape, std::uint64_t seed, bool positive = false) {
  Generator g(seed);
  F32 t = positive ? rand<float>(shape, g, false) : randn<float>(shape, g, false);
  if (positive)
    for (auto& v : t.mutable_value()) v += 0.5f;
  t.requires_grad_(true);
  return t;
}

Array<float> upstream(const Shape& shape) {
  Generator g(999);
  return randn<float>(shape, g, false).value();
}

// y's value, then backward with a fixed random upstream gradient and each input's gradient.
Arrays value_and_grads(const F32& y, const std::vector<F32>& inputs) {
  y.backward(Tensor<float>(upstream(y.shape())));
  Arrays out{y.value()};
  for (const auto& x : inputs) out.push_back(x.grad());
  return out;
}

void expect_bitwise(const Array<float>& want, const Array<float>& got, const std::string& what) {
  ASSERT_EQ(shape_of(want), shape_of(got)) << what;
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
      << what << ": not bitwise identical, max |diff| " << max_abs_diff(want, got);
}

// f() at 1 thread, then at 2 and 3: every array bitwise equal.
void expect_thread_invariant(const std::string& name, const std::function<Arrays()>& f) {
  ThreadCountGuard guard;
  set_num_threads(1);
  const Arrays want = f();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const Arrays got = f();
    ASSERT_EQ(want.size(), got.size()) << name;
    for (std::size_t i = 0; i < want.size(); ++i)
      expect_bitwise(want[i], got[i],
                     name + ": output " + std::to_string(i) + " at " + std::to_string(threads) + " threads");
  }
}

// The op cases: each builds its inputs from `shape` (B, T, C), runs forward and backward.
struct Case {
  std::string name;
  std::function<Arrays(const Shape&)> run;
};

IndexArray indices(std::size_t m, std::int64_t n, std::uint64_t seed) {
  IndexArray idx = xt::zeros<std::int64_t>(std::vector<std::size_t>{m});
  std::uint64_t state = seed;
  for (std::size_t j = 0; j < m; ++j) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    idx(j) = static_cast<std::int64_t>((state >> 33) % static_cast<std::uint64_t>(n));
  }
  return idx;
}

std::vector<Case> cases() {
  auto unary = [](const char* name, std::function<F32(const F32&)> op, bool positive = false) {
    return Case{name, [op, positive](const Shape& s) {
                  F32 x = leaf(s, 1, positive);
                  return value_and_grads(op(x), {x});
                }};
  };
  auto binary = [](const char* name, std::function<F32(const F32&, const F32&)> op,
                   std::function<Shape(const Shape&)> b_shape, bool positive_b = false) {
    return Case{name, [op, b_shape, positive_b](const Shape& s) {
                  F32 a = leaf(s, 1), b = leaf(b_shape(s), 2, positive_b);
                  return value_and_grads(op(a, b), {a, b});
                }};
  };
  const auto same = [](const Shape& s) { return s; };
  const auto bias = [](const Shape& s) { return Shape{s.back()}; };            // (C): sum over (B*T, C)
  const auto row_bcast = [](const Shape& s) { return Shape{s[0], 1, s[2]}; };  // (B, 1, C)
  const auto col_bcast = [](const Shape& s) { return Shape{s[0], s[1], 1}; };  // (B, T, 1)
  return {
      unary("exp", [](const F32& x) { return exp(x); }),
      unary("tanh", [](const F32& x) { return tanh(x); }),
      unary("sigmoid", [](const F32& x) { return sigmoid(x); }),
      unary("relu", [](const F32& x) { return relu(x); }),
      unary("silu", [](const F32& x) { return silu(x); }),
      unary(
          "log", [](const F32& x) { return log(x); }, true),
      unary("pow", [](const F32& x) { return pow(x, 3.0f); }),
      unary("mul scalar", [](const F32& x) { return mul(x, 0.3f); }),
      unary("clamp", [](const F32& x) { return clamp(x, Scalar<float>(-0.5f), Scalar<float>(0.5f)); }),
      binary(
          "add", [](const F32& a, const F32& b) { return add(a, b); }, same),
      binary(
          "sub", [](const F32& a, const F32& b) { return sub(a, b); }, same),
      binary(
          "mul", [](const F32& a, const F32& b) { return mul(a, b); }, same),
      binary(
          "div", [](const F32& a, const F32& b) { return div(a, b); }, same, true),
      binary(
          "add bias (C)", [](const F32& a, const F32& b) { return add(a, b); }, bias),
      binary(
          "sub (B,1,C)", [](const F32& a, const F32& b) { return sub(a, b); }, row_bcast),
      binary(
          "mul (B,T,1)", [](const F32& a, const F32& b) { return mul(a, b); }, col_bcast),
      binary(
          "div (C)", [](const F32& a, const F32& b) { return div(a, b); }, bias, true),
      // x reaches y by three paths: its gradient is accumulated (Node::accumulate_grad's add).
      unary("accumulate", [](const F32& x) { return add(mul(x, 2.0f), add(exp(x), tanh(x))); }),
      unary("sum", [](const F32& x) { return mul(sum(x), 1.0f); }),
      unary("mean", [](const F32& x) { return mean(x); }),
      unary("sum dim 0,1",
            [](const F32& x) {
              return sum(x, {0, 1});
            }),
      unary("sum dim 2", [](const F32& x) { return sum(x, {2}, true); }),
      unary("mean dim 1", [](const F32& x) { return mean(x, {1}); }),
      unary("var dim 1", [](const F32& x) { return var(x, {1}); }),
      unary("var dim 2", [](const F32& x) { return var(x, {2}, false, true); }),
      unary("amax dim 0", [](const F32& x) { return amax(x, {0}); }),
      unary("amax dim 2", [](const F32& x) { return amax(x, {2}); }),
      unary("max", [](const F32& x) { return max(x); }),
      unary("max dim 1", [](const F32& x) { return max(x, 1).first; }),
      Case{"embedding",
           [](const Shape& s) {
             // (B*T) indices into a (C, C) table with many repeats, padding row 3.
             F32 w = leaf({s[2], s[2]}, 3);
             const IndexArray idx = indices(s[0] * s[1], static_cast<std::int64_t>(s[2]), 4);
             return value_and_grads(embedding(idx, w, std::int64_t(3)), {w});
           }},
      Case{"index_select dim 1",
           [](const Shape& s) {
             F32 x = leaf(s, 1);
             return value_and_grads(index_select(x, 1, indices(2 * s[1], static_cast<std::int64_t>(s[1]), 5)), {x});
           }},
      Case{"masked_fill",
           [](const Shape& s) {
             F32 x = leaf(s, 1);
             BoolArray mask = xt::zeros<bool>(std::vector<std::size_t>{s[1], s[2]});
             const IndexArray pick = indices(mask.size() / 3, static_cast<std::int64_t>(mask.size()), 6);
             for (auto p : pick) mask.data()[p] = true;
             return value_and_grads(masked_fill(x, mask, 0.25f), {x});
           }},
      // The losses: mse_loss (both inputs differentiable, each reduction), cross_entropy over
      // (B*T, C) and over (B, T, C) (classes along dim 1: strided logits), with ignored targets
      // and label smoothing.
      binary(
          "mse_loss none", [](const F32& a, const F32& b) { return mse_loss(a, b, "none"); }, same),
      binary(
          "mse_loss mean", [](const F32& a, const F32& b) { return mse_loss(a, b); }, same),
      binary(
          "mse_loss sum", [](const F32& a, const F32& b) { return mse_loss(a, b, "sum"); }, same),
      Case{"cross_entropy (N, C)",
           [](const Shape& s) {
             F32 x = leaf({s[0] * s[1], s[2]}, 1);
             IndexArray t = indices(s[0] * s[1], static_cast<std::int64_t>(s[2]), 8);
             t(1) = -100;
             return value_and_grads(cross_entropy(x, t, -100, "mean", 0.1), {x});
           }},
      Case{"cross_entropy (N, C, d)",
           [](const Shape& s) {
             F32 x = leaf(s, 1);
             IndexArray t = indices(s[0] * s[2], static_cast<std::int64_t>(s[1]), 9);
             t.reshape({s[0], s[2]});
             return value_and_grads(cross_entropy(x, t, -100, "none"), {x});
           }},
      // dropout from a fixed seed: the mask (and so y and dx) at any thread count.
      unary("dropout",
            [](const F32& x) {
              Generator g(123);
              return dropout(x, 0.3, true, &g);
            }),
      // A filled tensor (full_array) as an operand.
      unary("full", [](const F32& x) { return mul(x, full<float>(x.shape(), 1.5f)); }),
      Case{"where",
           [](const Shape& s) {
             F32 a = leaf(s, 1), b = leaf({s[2]}, 2);
             BoolArray cond = xt::zeros<bool>(std::vector<std::size_t>{s[1], 1});
             for (std::size_t i = 0; i < cond.size(); i += 2) cond.data()[i] = true;
             return value_and_grads(xgrad::where(cond, a, b), {a, b});
           }},
  };
}

}  // namespace

TEST(ParallelOps, EveryOpIsBitwiseThreadInvariantBelowAndAboveTheGrain) {
  for (const Case& c : cases()) {
    expect_thread_invariant(c.name + " small", [&] { return c.run(kSmall); });
    expect_thread_invariant(c.name + " large", [&] { return c.run(kLarge); });
  }
}

// Above the grain each op's forward and backward fork; below it nothing does (no fork/join for
// small tensors). Serial kernels publish no job at all, so this fails for any op left serial.
// Forward only: add (its backward hands dy over), max (a full reduction's fold is serial; the
// gradient's spread forks) and max over a dim (its backward writes one element per output).
TEST(ParallelOps, LargeWorkRunsOnThePoolSmallWorkInline) {
  const std::set<std::string> one_job{"add", "max", "max dim 1"};
  for (const Case& c : cases()) {
    EXPECT_EQ(jobs_at_two_threads([&] { c.run(kSmall); }), 0) << c.name;
    EXPECT_GE(jobs_at_two_threads([&] { c.run(kLarge); }), one_job.count(c.name) ? 1 : 2) << c.name;
  }
}

// Each piece on its own, above the grain: a pointwise forward, a same-shape add, a broadcast add,
// sum_to of a bias gradient, reductions, and Node::accumulate_grad's add.
TEST(ParallelOps, EachKernelForksOnItsOwn) {
  const F32 x = leaf(kLarge, 1), y = leaf(kLarge, 2), b = leaf({kLarge.back()}, 3);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(jobs_at_two_threads([&] { exp(x); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { add(x, y); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { add(x, b); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { sum_to(x.value(), Shape{kLarge.back()}); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { sum(x, {0, 1}); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { sum(x); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { amax(x, {2}); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { full_array<float>(kLarge, 0.0f, "test"); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { zeros<float>(kLarge); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { copy_array(x.value(), "test"); }), 1);
    EXPECT_EQ(jobs_at_two_threads([&] { mse_loss(x, y); }), 2);  // the difference, the sum
    Generator g(5);
    EXPECT_EQ(jobs_at_two_threads([&] { dropout(x, 0.5, true, &g); }), 1);  // mask and y in one pass
  }
  // x + x: the forward's add, the copy of the seed gradient (copy_array), add's backward copying
  // dy for its first operand (sum_to, copy_array), then x's second gradient added to its first
  // (accumulate_grad).
  F32 z = leaf(kLarge, 4);
  EXPECT_EQ(jobs_at_two_threads([&] { add(z, z).backward(Tensor<float>(upstream(kLarge))); }), 4);
}

// sum_to split by output gives exactly the serial walk's float sums (each output adds its rows in
// order), for the (R, K), (K1, R, K2) and (K1, R) patterns and one that does not merge.
TEST(ParallelOps, SumToEqualsTheSerialSumExactly) {
  ThreadCountGuard guard;
  set_num_threads(3);
  const Array<float> g = leaf({9, 43, 211}, 7).value();
  const auto serial = [&](const Shape& to) {
    const Shape gs = shape_of(g);
    Array<float> out = xt::zeros<float>(to);
    for (std::size_t a = 0; a < gs[0]; ++a)
      for (std::size_t t = 0; t < gs[1]; ++t)
        for (std::size_t c = 0; c < gs[2]; ++c) {
          const std::size_t o0 = to.size() == 3 && to[0] != 1 ? a : 0;
          const std::size_t o1 = to.size() >= 2 && to[to.size() - 2] != 1 ? t : 0;
          const std::size_t o2 = to.back() != 1 ? c : 0;
          const std::size_t o = to.size() == 3 ? (o0 * to[1] + o1) * to[2] + o2 : to.size() == 2 ? o1 * to[1] + o2 : o2;
          out.data()[o] += g.data()[(a * gs[1] + t) * gs[2] + c];
        }
    return out;
  };
  for (const Shape& to : {Shape{211}, Shape{43, 211}, Shape{9, 1, 211}, Shape{9, 43, 1}, Shape{1, 43, 1}, Shape{1}})
    expect_bitwise(serial(to), sum_to(g, to), "sum_to " + std::to_string(to.size()) + "-d");
}

// dropout's mask at any thread count is the serial draw's (element i kept when the generator's
// i-th uniform() >= p), as before the draw was split, and the generator ends where n serial
// draws leave it: p = 0.3 over the large shape (split, each block jumping ahead) and the small one.
TEST(ParallelOps, DropoutMaskIsTheSerialDrawAtAnyThreadCount) {
  ThreadCountGuard guard;
  for (const Shape& shape : {kSmall, kLarge}) {
    const F32 x = ones<float>(shape);
    const double p = 0.3;
    Generator serial(2024);
    Array<float> want = xt::zeros<float>(shape);
    for (std::size_t i = 0; i < want.size(); ++i)
      want.data()[i] = serial.uniform() >= p ? float(1.0 / (1.0 - p)) : 0.0f;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Generator g(2024);
      const F32 y = dropout(x, p, true, &g);
      expect_bitwise(want, y.value(), "dropout mask at " + std::to_string(threads) + " threads");
      EXPECT_EQ(g.get_state(), serial.get_state()) << threads << " threads";
    }
  }
}

// Generator::state_ahead / discard: the state n draws on, for n across the jump table's bits.
TEST(ParallelOps, GeneratorJumpAheadEqualsDrawing) {
  Generator g(77);
  const GeneratorState start = g.get_state();
  std::uint64_t drawn = 0;
  for (std::uint64_t n : {0ull, 1ull, 2ull, 4095ull, 4096ull, 65537ull, 1000003ull}) {
    while (drawn < n) {
      g.next_u64();
      ++drawn;
    }
    Generator from(1);
    from.set_state(start);
    EXPECT_EQ(from.state_ahead(n), g.get_state()) << n;
    from.discard(n);
    EXPECT_EQ(from.get_state(), g.get_state()) << n;
  }
  // Large jumps compose: (a + b) = a then b, past the precomputed 2^48 as well.
  Generator a(5), b(5);
  const std::uint64_t big = (std::uint64_t{1} << 47) + 12345, huge = (std::uint64_t{1} << 60) + 3;
  a.discard(big);
  a.discard(huge);
  b.discard(big + huge);
  EXPECT_EQ(a.get_state(), b.get_state());
  EXPECT_FALSE(a.get_state() == Generator(5).get_state());
}
