// The multi-tensor ("flat") steps (optim/flat_chunks.hpp): the split of a list of tensors into
// units and chunks; Adam and AdamW over many parameters at once, bit for bit equal to each tensor
// stepped alone and, to rounding, to a plain per-element loop written here, at 1 and 2 threads;
// one fork/join per group; clip_grad_norm_'s parallel reduction, equal at every thread count.
#include "test_util.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/optim/flat_chunks.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {

// Parameter sizes: a scalar, tails of every SIMD width, sizes around the unit, and a tensor large
// enough that the list is split across threads (and within that tensor).
const std::vector<std::size_t> kSizes = {1, 7, 17, 1000, 1023, 1024, 1025, 3, 70001, 2048, 5};

template <class T>
Array<T> random_values(std::size_t n, std::uint64_t seed) {
  Generator gen(seed);
  return randn<T>({n}, gen).value();
}

bool bitwise_equal(const Array<double>& a, const Array<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// ---- the split ------------------------------------------------------------------------------------

TEST(FlatUnits, PiecesCoverEveryElementOnceAndSplitTensorsOnUnitBoundaries) {
  using flat::FlatUnits;
  const std::vector<std::size_t> sizes = {0, 5, 1024, 0, 1025, 3000, 0};
  const FlatUnits units(sizes);
  EXPECT_EQ(units.units(), 0u + 1 + 1 + 2 + 3);
  for (std::size_t u0 = 0; u0 <= units.units(); ++u0)
    for (std::size_t u1 = u0; u1 <= units.units(); ++u1) {
      std::vector<std::vector<int>> hits(sizes.size());
      for (std::size_t k = 0; k < sizes.size(); ++k) hits[k].assign(sizes[k], 0);
      std::size_t last = 0;
      bool first = true;
      units.walk(u0, u1, [&](std::size_t k, std::size_t b, std::size_t e) {
        EXPECT_TRUE(first || k > last) << "pieces out of order or two for one tensor";
        first = false;
        last = k;
        EXPECT_LT(b, e);
        EXPECT_EQ(b % FlatUnits::kUnit, 0u) << "a piece starts off a unit boundary";
        EXPECT_TRUE(e == sizes[k] || e % FlatUnits::kUnit == 0) << "a piece ends off a unit boundary";
        for (std::size_t i = b; i < e; ++i) ++hits[k][i];
      });
      for (std::size_t k = 0; k < sizes.size(); ++k)
        for (std::size_t i = 0; i < sizes[k]; ++i) {
          const std::size_t u = units.unit_of(k, i);
          ASSERT_EQ(hits[k][i], (u >= u0 && u < u1) ? 1 : 0)
              << "tensor " << k << " element " << i << ", units [" << u0 << ", " << u1 << ")";
        }
    }
  EXPECT_EQ(FlatUnits(std::vector<std::size_t>{}).units(), 0u);
  EXPECT_EQ(FlatUnits(std::vector<std::size_t>{0, 0}).units(), 0u);
}

// ---- Adam and AdamW against a plain loop ----------------------------------------------------------

struct AdamCase {
  bool decoupled, amsgrad, maximize;
  double weight_decay;
};

// One parameter's Adam state, stepped element by element in torch 1.13's operation order
// (_single_tensor_adam / _single_tensor_adamw; Python scalars become T, bias corrections in double).
template <class T>
struct PlainAdam {
  double lr, beta1, beta2, eps;
  AdamCase c;
  std::vector<T> theta, m, v, vmax;
  int step = 0;

  void update(const Array<T>& grad) {
    ++step;
    const double bc1 = 1.0 - std::pow(beta1, double(step));
    const double bc2 = 1.0 - std::pow(beta2, double(step));
    const T b1 = T(beta1), omb1 = T(1.0 - beta1), b2 = T(beta2), omb2 = T(1.0 - beta2);
    const T wd = T(c.weight_decay), decay = T(1.0 - lr * c.weight_decay);
    const T neg_step = T(-(lr / bc1)), bc2_sqrt = T(std::sqrt(bc2)), e = T(eps);
    for (std::size_t i = 0; i < theta.size(); ++i) {
      T g = grad(i);
      if (c.maximize) g = -g;
      if (c.decoupled)
        theta[i] = theta[i] * decay;
      else if (c.weight_decay != 0)
        g = g + wd * theta[i];
      m[i] = m[i] * b1;
      m[i] = m[i] + omb1 * g;
      v[i] = v[i] * b2;
      v[i] = v[i] + omb2 * g * g;
      T second = v[i];
      if (c.amsgrad) {
        if (vmax[i] != vmax[i] || vmax[i] > v[i]) {
        } else {
          vmax[i] = v[i];
        }
        second = vmax[i];
      }
      const T denom = std::sqrt(second) / bc2_sqrt + e;
      theta[i] = theta[i] + neg_step * m[i] / denom;
    }
  }
};

template <class T>
std::vector<T> to_vector(const Array<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.size());
}

template <class T>
std::unique_ptr<Optimizer<T>> make_adam(const std::vector<Tensor<T>>& params, const AdamCase& c) {
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-6;
  if (c.decoupled)
    return std::make_unique<AdamW<T>>(params, AdamWOptions(lr)
                                                  .betas({beta1, beta2})
                                                  .eps(eps)
                                                  .weight_decay(c.weight_decay)
                                                  .amsgrad(c.amsgrad)
                                                  .maximize(c.maximize));
  return std::make_unique<Adam<T>>(params, AdamOptions(lr)
                                               .betas({beta1, beta2})
                                               .eps(eps)
                                               .weight_decay(c.weight_decay)
                                               .amsgrad(c.amsgrad)
                                               .maximize(c.maximize));
}

// a == b bitwise when tol is 0, else |a - b| <= tol * max(1, |b|) element by element.
template <class T>
::testing::AssertionResult same(const Array<T>& a, const std::vector<T>& b, double tol) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (std::size_t i = 0; i < b.size(); ++i) {
    const bool ok = tol == 0 ? std::memcmp(&a(i), &b[i], sizeof(T)) == 0
                             : std::abs(double(a(i)) - double(b[i])) <= tol * std::max(1.0, std::abs(double(b[i])));
    if (!ok) return ::testing::AssertionFailure() << "element " << i << ": " << a(i) << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// Steps one optimizer over kSizes' parameters 3 times (one parameter left without a gradient at
// step 1, so that the step counts differ within the group), one optimizer per parameter over
// copies of them, and the plain loop beside both. After each step, every parameter and state array
// equals its copy's bitwise (the flat step computes each element as a step of its tensor alone
// does), and the plain loop's to `plain_tol` (0: bitwise).
template <class T>
void expect_flat_adam_equals_plain_loop(const AdamCase& c, int threads, double plain_tol) {
  set_num_threads(threads);
  std::vector<Tensor<T>> params, alone;
  std::vector<std::unique_ptr<Optimizer<T>>> alone_opts;
  std::vector<PlainAdam<T>> plain;
  for (std::size_t k = 0; k < kSizes.size(); ++k) {
    params.emplace_back(random_values<T>(kSizes[k], 100 + k), true);
    alone.emplace_back(random_values<T>(kSizes[k], 100 + k), true);
    alone_opts.push_back(make_adam<T>({alone.back()}, c));
    const std::vector<T> theta = to_vector(params.back().value());
    plain.push_back({1e-2, 0.9, 0.99, 1e-6, c, theta, std::vector<T>(theta.size()), std::vector<T>(theta.size()),
                     std::vector<T>(theta.size())});
  }
  std::unique_ptr<Optimizer<T>> opt = make_adam<T>(params, c);
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (step == 1 && k == 4) {
        params[k].zero_grad(/*set_to_none=*/true);
        continue;
      }
      params[k].set_grad(random_values<T>(kSizes[k], 1000 * step + k));
      alone[k].set_grad(params[k].grad());
      alone_opts[k]->step();
      plain[k].update(params[k].grad());
    }
    opt->step();
    for (std::size_t k = 0; k < params.size(); ++k) {
      SCOPED_TRACE("step " + std::to_string(step) + ", parameter " + std::to_string(k) + " of " +
                   std::to_string(kSizes[k]));
      const ParamState<T> state = opt->state(params[k]), state_alone = alone_opts[k]->state(alone[k]);
      ASSERT_EQ(state.step, plain[k].step);
      ASSERT_EQ(state_alone.step, plain[k].step);
      const std::vector<const char*> names = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
      const std::vector<const std::vector<T>*> want = {&plain[k].m, &plain[k].v, &plain[k].vmax};
      ASSERT_TRUE(same(params[k].value(), to_vector(alone[k].value()), 0)) << "θ, against its tensor alone";
      ASSERT_TRUE(same(params[k].value(), plain[k].theta, plain_tol)) << "θ, against the plain loop";
      for (std::size_t a = 0; a < names.size(); ++a) {
        if (a == 2 && !c.amsgrad) {
          ASSERT_FALSE(state.has(names[a]));
          continue;
        }
        ASSERT_TRUE(same(state.at(names[a]), to_vector(state_alone.at(names[a])), 0)) << names[a] << ", alone";
        ASSERT_TRUE(same(state.at(names[a]), *want[a], plain_tol)) << names[a] << ", against the plain loop";
      }
    }
  }
}

template <class T>
void expect_every_adam_case(const char* type, double plain_tol) {
  ThreadCountGuard guard;
  for (bool decoupled : {false, true})
    for (bool amsgrad : {false, true})
      for (bool maximize : {false, true})
        for (double wd : {0.0, 0.1})
          for (int threads : {1, 2}) {
            if (threads == 1 && (amsgrad || maximize || wd != 0)) continue;  // the serial path: the plain cases
            SCOPED_TRACE(std::string(type) + (decoupled ? " AdamW" : " Adam") + (amsgrad ? " amsgrad" : "") +
                         (maximize ? " maximize" : "") + " weight_decay " + std::to_string(wd) + ", " +
                         std::to_string(threads) + " threads");
            expect_flat_adam_equals_plain_loop<T>({decoupled, amsgrad, maximize, wd}, threads, plain_tol);
            if (::testing::Test::HasFatalFailure()) return;
          }
}

// The kernels are compiled with the compiler's default floating-point contraction: GCC fuses a
// multiply and an add into one FMA (one rounding) where it chooses to, differently in the SIMD body
// and the scalar tail, so the plain loop here agrees to rounding only.
TEST(FlatAdam, FloatEqualsEachTensorAloneBitForBit) { expect_every_adam_case<float>("float", 1e-5); }
TEST(FlatAdam, DoubleEqualsEachTensorAloneBitForBit) { expect_every_adam_case<double>("double", 1e-13); }

// The pool's jobs while f runs.
std::atomic<int> g_jobs{0};
template <class F>
int pool_jobs_of(F&& f) {
  g_jobs = 0;
  detail::set_pool_observer([](const detail::PoolEvent& e) {
    if (e.kind == detail::PoolEvent::Kind::Job) ++g_jobs;
  });
  f();
  detail::set_pool_observer(nullptr);
  return g_jobs.load();
}

std::vector<Tensor<float>> small_tensors_with_grads(std::size_t count, std::size_t n) {
  std::vector<Tensor<float>> params;
  for (std::size_t k = 0; k < count; ++k) {
    params.emplace_back(random_values<float>(n, k), true);
    params.back().set_grad(random_values<float>(n, 500 + k));
  }
  return params;
}

TEST(FlatAdam, ManySmallTensorsAreOneParallelJobAndManyLargeOnesToo) {
  ThreadCountGuard guard;
  set_num_threads(2);
  // 200 tensors of 1,000: each alone is below the split size, together one job for both threads.
  std::vector<Tensor<float>> small = small_tensors_with_grads(200, 1000);
  AdamW<float> small_opt(small);
  EXPECT_EQ(pool_jobs_of([&] { small_opt.step(); }), 1);
  // Three tensors each large enough to split: still one job for the whole group. The first step
  // also makes each tensor's exp_avg and exp_avg_sq, zero-filled on the pool (full_array).
  std::vector<Tensor<float>> large = small_tensors_with_grads(3, 100000);
  Adam<float> large_opt(large);
  EXPECT_EQ(pool_jobs_of([&] { large_opt.step(); }), 1 + 2 * 3);
  EXPECT_EQ(pool_jobs_of([&] { large_opt.step(); }), 1);
  // One thread: no job at all.
  set_num_threads(1);
  EXPECT_EQ(pool_jobs_of([&] { large_opt.step(); }), 0);
}

// ---- clip_grad_norm_ ------------------------------------------------------------------------------

TEST(FlatClipGradNorm, TheNormIsAParallelReductionEqualAtEveryThreadCount) {
  ThreadCountGuard guard;
  for (double norm_type : {2.0, 1.0, 3.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("norm_type " + std::to_string(norm_type));
    std::vector<double> totals;
    std::vector<std::vector<Array<double>>> clipped;
    int jobs_at_2 = 0;
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      std::vector<Tensor<double>> params;
      for (std::size_t k = 0; k < kSizes.size(); ++k) {
        params.emplace_back(random_values<double>(kSizes[k], k), true);
        params.back().set_grad(random_values<double>(kSizes[k], 50 + k));
      }
      double total = 0;
      const int jobs = pool_jobs_of([&] { total = clip_grad_norm_(params, 1.0, norm_type); });
      if (threads == 2) jobs_at_2 = jobs;
      totals.push_back(total);
      clipped.emplace_back();
      for (const auto& p : params) clipped.back().push_back(p.grad());
    }
    // The norm and the scaling each split across the threads: two jobs.
    EXPECT_EQ(jobs_at_2, 2);
    for (std::size_t t = 1; t < totals.size(); ++t) {
      EXPECT_EQ(std::memcmp(&totals[t], &totals[0], sizeof(double)), 0) << totals[t] << " vs " << totals[0];
      for (std::size_t k = 0; k < kSizes.size(); ++k)
        EXPECT_TRUE(bitwise_equal(clipped[t][k], clipped[0][k])) << "gradient " << k;
    }
    // And it is the norm: against one long double pass.
    long double want = 0;
    for (std::size_t k = 0; k < kSizes.size(); ++k) {
      const Array<double> g = random_values<double>(kSizes[k], 50 + k);
      long double per = 0;
      for (double x : g) {
        const long double a = std::abs(static_cast<long double>(x));
        if (std::isinf(norm_type))
          per = std::max(per, a);
        else
          per += std::pow(a, static_cast<long double>(norm_type));
      }
      if (std::isinf(norm_type))
        want = std::max(want, per);
      else
        want += per;
    }
    if (!std::isinf(norm_type)) want = std::pow(want, 1.0L / static_cast<long double>(norm_type));
    EXPECT_NEAR(totals[0], static_cast<double>(want), 1e-12 * static_cast<double>(want));
  }
}

TEST(FlatClipGradNorm, AGradientListedTwiceIsScaledTwiceAsInTorch) {
  ThreadCountGuard guard;
  set_num_threads(2);
  Tensor<double> p(random_values<double>(70001, 1), true);
  const Array<double> g = random_values<double>(70001, 2);
  p.set_grad(g);
  const double total = clip_grad_norm_(std::vector<Tensor<double>>{p, p}, 1.0);
  const double coef = 1.0 / (total + 1e-6);
  Array<double> want = g;
  for (double& x : want) x = (x * coef) * coef;
  EXPECT_TRUE(bitwise_equal(p.grad(), want));
}

}  // namespace
