// Intra-op threads (backend/parallel.hpp): set_num_threads and parallel_for themselves, then the
// key correctness argument for every kernel split across threads: with 1, 2 and 3 threads the
// values and gradients agree (bitwise where the split cannot change the arithmetic: GELU,
// LayerNorm's y and dx, attention, permute copies, Adam; to rounding where it can: gemm blocks,
// LayerNorm's dw/db piece sums). Sizes are chosen above each kernel's grain so that the
// parallel path runs.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include <xgrad/backend/gemm.hpp>
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

template <class T>
using Arrays = std::vector<Array<T>>;

template <class T>
Array<T> random_array(const Shape& shape, std::uint64_t seed) {
  Generator g(seed);
  return randn<T>(shape, g).value();
}

template <class T>
Tensor<T> leaf(const Shape& shape, std::uint64_t seed) {
  return Tensor<T>(random_array<T>(shape, seed), true);
}

// Backward from y with a seeded random upstream gradient; returns y and the inputs' gradients.
template <class T>
Arrays<T> value_and_grads(const Tensor<T>& y, const std::vector<Tensor<T>>& inputs) {
  y.backward(Tensor<T>(random_array<T>(y.shape(), 999)));
  Arrays<T> out{y.value()};
  for (const auto& x : inputs) out.push_back(x.grad());
  return out;
}

template <class R>
double max_abs(const R& a) {
  double m = 0;
  for (auto v : a) m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

// Expects `got` to equal `want` bitwise when rtol == 0, else within rtol of want's largest magnitude.
template <class T>
void expect_close(const Array<T>& want, const Array<T>& got, double rtol, const std::string& what) {
  ASSERT_EQ(shape_of(want), shape_of(got)) << what;
  if (rtol == 0) {
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(T)), 0)
        << what << ": not bitwise identical, max |diff| " << max_abs_diff(want, got);
  } else {
    EXPECT_LE(max_abs_diff(want, got), rtol * std::max(max_abs(want), 1e-30)) << what;
  }
}

// Runs f() with 1 thread, then with each of `counts`, and compares every array: bitwise when
// rtol[i] is 0 (or rtol is short), else within rtol[i] relative.
template <class T>
void expect_thread_invariant(const std::function<Arrays<T>()>& f, const std::vector<double>& rtol = {},
                             const std::vector<int>& counts = {2, 3}) {
  ThreadCountGuard guard;
  set_num_threads(1);
  const Arrays<T> want = f();
  for (int threads : counts) {
    set_num_threads(threads);
    const Arrays<T> got = f();
    ASSERT_EQ(want.size(), got.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      expect_close(want[i], got[i], i < rtol.size() ? rtol[i] : 0.0,
                   "output " + std::to_string(i) + " with " + std::to_string(threads) + " threads");
  }
}

struct Chunk {
  std::size_t begin, end;
  bool in_region;
};

// parallel_for(n, grain) with every chunk recorded; checks that the chunks tile [0, n) in order,
// each index visited exactly once. Returns the chunks sorted by begin.
std::vector<Chunk> run_tiling(std::size_t n, std::size_t grain) {
  std::vector<std::atomic<int>> hits(n);
  for (auto& h : hits) h.store(0);
  std::mutex mutex;
  std::vector<Chunk> chunks;
  detail::parallel_for(n, grain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex);
    chunks.push_back({b, e, detail::in_parallel_region()});
  });
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
  EXPECT_EQ(wrong, 0u) << "indices not visited exactly once, n " << n << ", grain " << grain;
  std::sort(chunks.begin(), chunks.end(), [](const Chunk& a, const Chunk& b) { return a.begin < b.begin; });
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_LT(chunks[c].begin, chunks[c].end);
    EXPECT_EQ(chunks[c].begin, c == 0 ? 0 : chunks[c - 1].end) << "chunks not contiguous";
  }
  if (n > 0) EXPECT_EQ(chunks.empty() ? 0 : chunks.back().end, n);
  else EXPECT_TRUE(chunks.empty());
  return chunks;
}

}  // namespace

// ---- set_num_threads / parallel_for ---------------------------------------------------------------

TEST(Parallel, SetNumThreadsRoundTripAndInvalidValues) {
  ThreadCountGuard guard;
  for (int n : {1, 2, 3, 4, 1}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
  }
  XGRAD_EXPECT_THROW_MSG(set_num_threads(0), "set_num_threads", "got 0");
  XGRAD_EXPECT_THROW_MSG(set_num_threads(-1), "set_num_threads", "got -1");
  XGRAD_EXPECT_THROW_MSG(set_num_threads(1025), "set_num_threads", "got 1025");
  EXPECT_EQ(get_num_threads(), 1);  // a rejected value leaves the pool as it was
}

TEST(Parallel, ParallelForCoversEveryIndexOnceInContiguousChunks) {
  ThreadCountGuard guard;
  const std::vector<std::pair<std::size_t, std::size_t>> cases = {
      {0, 1}, {1, 1}, {1, 0}, {5, 3}, {7, 4}, {8, 4}, {9, 4}, {10, 1}, {1000, 1}, {1000, 499}, {100003, 1000}};
  for (int threads = 1; threads <= 4; ++threads) {
    set_num_threads(threads);
    for (auto [n, grain] : cases) {
      SCOPED_TRACE(std::to_string(threads) + " threads, n " + std::to_string(n) + ", grain " + std::to_string(grain));
      const std::vector<Chunk> chunks = run_tiling(n, grain);
      const std::size_t g = std::max<std::size_t>(grain, 1);
      const bool parallel = threads > 1 && n >= 2 * g;
      EXPECT_LE(chunks.size(), static_cast<std::size_t>(threads));
      EXPECT_EQ(chunks.size() > 1, parallel);
      if (chunks.size() > 1) {
        std::size_t lo = n, hi = 0;
        for (const Chunk& c : chunks) {
          lo = std::min(lo, c.end - c.begin);
          hi = std::max(hi, c.end - c.begin);
          EXPECT_TRUE(c.in_region) << "in_parallel_region() false in a chunk";
        }
        EXPECT_GE(lo, g) << "a chunk smaller than the grain";
        EXPECT_LE(hi - lo, 1u) << "unbalanced chunks";
      }
    }
  }
  EXPECT_FALSE(detail::in_parallel_region());
}

TEST(Parallel, ExceptionInAChunkIsRethrownAndThePoolStillWorks) {
  ThreadCountGuard guard;
  for (int threads = 1; threads <= 4; ++threads) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    set_num_threads(threads);
    std::vector<std::atomic<int>> hits(1000);
    for (auto& h : hits) h.store(0);
    try {
      detail::parallel_for(1000, 10, [&](std::size_t b, std::size_t e) {
        if (b <= 500 && 500 < e) throw std::runtime_error("chunk with 500");
        for (std::size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk with 500");
    }
    // The other chunks ran to completion before the rethrow: only the thrower's chunk (all of
    // [0, 1000) with one thread), about 1000 / threads indices around 500, is left unvisited.
    std::size_t first = 1000, last = 0, missed = 0;
    for (std::size_t i = 0; i < 1000; ++i)
      if (hits[i].load() == 0) first = std::min(first, i), last = i, ++missed;
    EXPECT_EQ(missed, last - first + 1) << "indices outside the throwing chunk were not visited";
    EXPECT_TRUE(first <= 500 && last >= 500 && missed >= 1000u / threads && missed <= 1000u / threads + 1);
    // Every chunk throws: one of the exceptions comes out.
    EXPECT_THROW(detail::parallel_for(1000, 10, [](std::size_t, std::size_t) { throw std::logic_error("all"); }),
                 std::logic_error);
    run_tiling(100000, 100);
    EXPECT_FALSE(detail::in_parallel_region());
  }
}

TEST(Parallel, NestedParallelForRunsSeriallyAndSetNumThreadsInsideThrows) {
  ThreadCountGuard guard;
  set_num_threads(3);
  std::atomic<int> outer_chunks{0}, inner_ok{0}, throws_inside{0};
  detail::parallel_for(300, 100, [&](std::size_t, std::size_t) {
    outer_chunks.fetch_add(1);
    const std::thread::id me = std::this_thread::get_id();
    std::vector<std::pair<std::size_t, std::size_t>> inner;
    bool same_thread = true;
    detail::parallel_for(1000, 1, [&](std::size_t b, std::size_t e) {
      inner.emplace_back(b, e);  // serial: no lock needed
      same_thread = same_thread && std::this_thread::get_id() == me && detail::in_parallel_region();
    });
    if (inner.size() == 1 && inner[0] == std::pair<std::size_t, std::size_t>(0, 1000) && same_thread)
      inner_ok.fetch_add(1);
    try {
      set_num_threads(2);
    } catch (const std::invalid_argument& e) {
      if (std::string(e.what()).find("set_num_threads") != std::string::npos) throws_inside.fetch_add(1);
    }
  });
  EXPECT_EQ(outer_chunks.load(), 3);
  EXPECT_EQ(inner_ok.load(), 3);
  EXPECT_EQ(throws_inside.load(), 3);
  EXPECT_EQ(get_num_threads(), 3);
}

// Work below 2 * grain runs inline, as a plain call: no region (see parallel.hpp).
TEST(Parallel, InParallelRegionOnlyWhileAPoolJobRuns) {
  ThreadCountGuard guard;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    bool inside = true;
    detail::parallel_for(10, 100, [&](std::size_t, std::size_t) { inside = detail::in_parallel_region(); });
    EXPECT_FALSE(inside) << threads << " threads";
  }
}

TEST(Parallel, ConcurrentCallersFromTwoThreadsGetCorrectResults) {
  ThreadCountGuard guard;
  set_num_threads(2);
  Tensor<float> x(random_array<float>({50000}, 1));
  const Array<float> want = gelu(x).value();
  std::atomic<int> bad_sums{0}, bad_gelu{0};
  std::thread a([&] {
    for (int it = 0; it < 300; ++it) {
      std::atomic<std::size_t> sum{0};
      detail::parallel_for(20000, 256, [&](std::size_t b, std::size_t e) {
        std::size_t s = 0;
        for (std::size_t i = b; i < e; ++i) s += i;
        sum.fetch_add(s);
      });
      bad_sums += sum.load() != std::size_t(20000) * 19999 / 2;
    }
  });
  std::thread b([&] {
    for (int it = 0; it < 100; ++it) {
      const Array<float> y = gelu(x).value();
      bad_gelu += std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) != 0;
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(bad_sums.load(), 0);
  EXPECT_EQ(bad_gelu.load(), 0);
}

// ---- gemm ---------------------------------------------------------------------------------------

namespace {

// detail::gemm on sub-matrices of larger buffers (every leading dim `pad` above its minimum),
// C pre-filled (NaN inside the block when beta = 0: it must be overwritten; a sentinel in the
// padding, which must stay). 2 and 3 threads against 1 thread, and all against a double loop.
template <class T>
void check_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha, T beta, std::size_t pad) {
  SCOPED_TRACE(::testing::Message() << (ta ? "A^T " : "A ") << (tb ? "B^T " : "B ") << m << "x" << n << "x" << k
                                    << " beta " << beta << " pad " << pad << (sizeof(T) == 4 ? " float" : " double"));
  const std::size_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
  Generator g(m * 7 + n * 3 + k);
  auto fill = [&g](std::size_t size) {
    std::vector<T> v(size);
    for (auto& x : v) x = static_cast<T>(2 * g.uniform() - 1);
    return v;
  };
  const std::vector<T> a = fill((ta ? k : m) * lda), b = fill((tb ? n : k) * ldb);
  std::vector<T> c0 = fill(m * ldc);
  const T sentinel = T(12345);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < ldc; ++j)
      if (j >= n) c0[i * ldc + j] = sentinel;
      else if (beta == T(0)) c0[i * ldc + j] = std::numeric_limits<T>::quiet_NaN();
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<T> c = c0;
    detail::gemm<T>(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    return c;
  };
  ThreadCountGuard guard;
  const std::vector<T> one = run(1);
  // Against the 1-thread result: relative to C's largest entry. Against the double loop: the
  // classic bound k * eps * sum_p |a b| per element (plus the final alpha/beta update).
  const double tol = sizeof(T) == 4 ? 1e-5 : 1e-12, eps = std::numeric_limits<T>::epsilon();
  const double scale = max_abs(one);
  for (int threads : {1, 2, 3}) {
    const std::vector<T> c = threads == 1 ? one : run(threads);
    std::size_t bad_pad = 0, bad_threads = 0, bad_naive = 0;
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < ldc; ++j) {
        const T got = c[i * ldc + j];
        if (j >= n) {
          bad_pad += got != sentinel;
          continue;
        }
        double s = 0, bound = 0;  // bound: sum |a b| over k, the rounding scale of the element
        for (std::size_t p = 0; p < k; ++p) {
          const double av = ta ? a[p * lda + i] : a[i * lda + p], bv = tb ? b[j * ldb + p] : b[p * ldb + j];
          s += av * bv;
          bound += std::abs(av * bv);
        }
        const double c_old = beta == T(0) ? 0.0 : c0[i * ldc + j];
        const double want = alpha * s + beta * c_old;
        bad_naive += !(std::abs(got - want) <= (k + 2) * eps * (std::abs(alpha) * bound + std::abs(beta * c_old)));
        bad_threads += !(std::abs(static_cast<double>(got) - one[i * ldc + j]) <= tol * scale);
      }
    }
    EXPECT_EQ(bad_pad, 0u) << threads << " threads wrote outside the (m, n) block";
    EXPECT_EQ(bad_naive, 0u) << threads << " threads: elements away from the double loop";
    EXPECT_EQ(bad_threads, 0u) << threads << " threads: elements away from the 1-thread result";
  }
}

}  // namespace

TEST(Parallel, GemmSplitMatchesOneThreadAndNaiveLoop) {
  // m >= n splits rows, m < n columns; none a multiple of 16; 128x128x64 is exactly 2^20 MACs.
  const std::vector<std::array<std::size_t, 3>> shapes = {{333, 77, 61}, {77, 333, 61}, {17, 4001, 16}, {128, 128, 64}};
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (double beta : {0.0, 1.0}) {
        check_gemm<float>(t & 1, t & 2, s[0], s[1], s[2], beta == 0 ? 1.0f : 0.5f, float(beta), 5);
        check_gemm<double>(t & 1, t & 2, s[0], s[1], s[2], beta == 0 ? 1.0 : 0.5, beta, 5);
      }
  check_gemm<float>(false, false, 333, 77, 61, 1.0f, 0.0f, 0);  // tight leading dims
  check_gemm<double>(true, true, 77, 333, 61, 1.0, 1.0, 0);
}

TEST(Parallel, MatmulAndLinearForwardBackwardAcrossThreadCounts) {
  // (256, 96) @ (96, 80): 2M MACs forward and in each backward product.
  expect_thread_invariant<float>([] {
    auto a = leaf<float>({256, 96}, 1), b = leaf<float>({96, 80}, 2);
    return value_and_grads(matmul(a, b), {a, b});
  }, {1e-5, 1e-5, 1e-5});
  // Batched against a shared matrix (one gemm over batch * m rows), and batch against batch.
  expect_thread_invariant<float>([] {
    auto a = leaf<float>({4, 128, 64}, 3), b = leaf<float>({64, 48}, 4);
    return value_and_grads(matmul(a, b), {a, b});
  }, {1e-5, 1e-5, 1e-5});
  expect_thread_invariant<double>([] {
    auto a = leaf<double>({3, 200, 64}, 5), b = leaf<double>({3, 64, 96}, 6);
    return value_and_grads(matmul(a, b), {a, b});
  }, {1e-12, 1e-12, 1e-12});
  expect_thread_invariant<float>([] {
    auto x = leaf<float>({8, 64, 96}, 7), w = leaf<float>({80, 96}, 8), b = leaf<float>({80}, 9);
    return value_and_grads(linear(x, w, b), {x, w, b});
  }, {1e-5, 1e-5, 1e-5, 1e-5});
}

// ---- elementwise, layer_norm, attention, Adam, permute ---------------------------------------------

TEST(Parallel, GeluBitwiseAcrossThreadCounts) {
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    expect_thread_invariant<float>([approximate] {
      auto x = leaf<float>({100003}, 11);  // 25 blocks of 4096, the last one partial
      return value_and_grads(gelu(x, approximate), {x});
    });
  }
}

TEST(Parallel, GeluFloatMatchesDoubleOverALongArray) {
  // [-10, 10] in 40009 steps: SIMD batches and a scalar tail (40009 is odd), several blocks.
  const std::size_t n = 40009;
  Array<double> xd = xt::linspace<double>(-10.0, 10.0, n);
  for (const char* approximate : {"none", "tanh"}) {
    SCOPED_TRACE(approximate);
    Tensor<double> x64(xd, true);
    Tensor<float> x32(Array<float>(xt::cast<float>(xd)), true);
    Tensor<double> y64 = gelu(x64, approximate);
    Tensor<float> y32 = gelu(x32, approximate);
    y64.backward(ones<double>({n}));  // the gradient is dy/dx itself
    y32.backward(ones<float>({n}));
    const Arrays<double> d = {y64.value(), x64.grad()};
    const Arrays<float> f = {y32.value(), x32.grad()};
    for (std::size_t out = 0; out < 2; ++out) {
      std::size_t bad = 0, worst = 0;
      double worst_err = 0;
      for (std::size_t i = 0; i < n; ++i) {
        // Relative, with an absolute floor of 1e-6 where |y| < 1: in the negative tail 1 + erf
        // (1 + tanh) cancels in float, as in PyTorch's float formula, so only absolute error is small.
        const double want = d[out](i), err = std::abs(f[out](i) - want) / std::max(std::abs(want), 1.0);
        bad += err > 1e-6;
        if (err > worst_err) worst_err = err, worst = i;
      }
      EXPECT_EQ(bad, 0u) << (out == 0 ? "forward" : "backward") << ": worst at x = " << xd(worst) << ", float "
                         << f[out](worst) << ", double " << d[out](worst);
    }
  }
}

TEST(Parallel, LayerNormAcrossThreadCounts) {
  // 2560 rows of 96: 15 pieces of >= 16K elements available, so every thread count splits.
  expect_thread_invariant<float>([] {
    auto x = leaf<float>({64, 40, 96}, 1), w = leaf<float>({96}, 2), b = leaf<float>({96}, 3);
    return value_and_grads(layer_norm(x, {96}, w, b), {x, w, b});
  }, {0, 0, 1e-6, 1e-6});
  expect_thread_invariant<double>([] {
    auto x = leaf<double>({64, 40, 96}, 4), w = leaf<double>({96}, 5), b = leaf<double>({96}, 6);
    return value_and_grads(layer_norm(x, {96}, w, b), {x, w, b});
  }, {0, 0, 1e-13, 1e-13});
}

TEST(Parallel, AttentionBitwiseAcrossThreadCounts) {
  // 64 heads of 32x32x32: 2 heads per chunk at least, so up to 32 chunks.
  const Shape s = {8, 8, 32, 32};
  BoolArray bool_mask = BoolArray::from_shape({8, 1, 32, 32});
  Generator g(5);
  for (auto& v : bool_mask) v = g.uniform() < 0.3;
  const AttnMask<float> float_mask(random_array<float>({32, 32}, 4));
  for (const char* variant : {"float mask", "bool mask", "causal", "dropout"}) {
    SCOPED_TRACE(variant);
    expect_thread_invariant<float>([&] {
      auto q = leaf<float>(s, 1), k = leaf<float>(s, 2), v = leaf<float>(s, 3);
      Generator dropout(77);  // the same seed for every thread count
      const std::string c = variant;
      Tensor<float> y = c == "float mask"  ? scaled_dot_product_attention(q, k, v, float_mask)
                        : c == "bool mask" ? scaled_dot_product_attention(q, k, v, AttnMask<float>(bool_mask))
                        : c == "causal"    ? scaled_dot_product_attention(q, k, v, {}, 0.0, true)
                                        : scaled_dot_product_attention(q, k, v, {}, 0.3, false, 0.25, false, &dropout);
      return value_and_grads(y, {q, k, v});
    });
  }
}

TEST(Parallel, PermuteAndTransposeCopiesAcrossThreadCounts) {
  const Shape s = {16, 24, 20, 18};  // 138240 elements
  const std::vector<std::int64_t> perm = {2, 0, 3, 1};
  expect_thread_invariant<float>([&] {
    auto x = leaf<float>(s, 1);
    Arrays<float> r = value_and_grads(contiguous(permute(x, perm)), {x});
    // y[i0, i1, i2, i3] = x[i1, i3, i0, i2]; the gradient is the upstream one permuted back.
    const Array<float> u = random_array<float>(shape_of(r[0]), 999);  // value_and_grads' upstream gradient
    std::size_t bad = 0;
    for (std::size_t i0 = 0; i0 < s[2]; ++i0)
      for (std::size_t i1 = 0; i1 < s[0]; ++i1)
        for (std::size_t i2 = 0; i2 < s[3]; ++i2)
          for (std::size_t i3 = 0; i3 < s[1]; ++i3)
            bad += r[0](i0, i1, i2, i3) != x.value()(i1, i3, i0, i2) || r[1](i1, i3, i0, i2) != u(i0, i1, i2, i3);
    EXPECT_EQ(bad, 0u) << "permute does not follow the index mapping";
    return r;
  });
  expect_thread_invariant<float>([&] {
    auto x = leaf<float>(s, 2);
    return value_and_grads(transpose(x, 1, 3), {x});
  });
  expect_thread_invariant<double>([] {  // 4 output rows of 20000: one row per chunk
    auto x = leaf<double>({20000, 4}, 3);
    Arrays<double> r = value_and_grads(transpose(x, 0, 1), {x});
    EXPECT_EQ(max_abs_diff(r[0], Array<double>(xt::transpose(x.value()))), 0.0);
    return r;
  });
}

TEST(Parallel, AdamStepsBitwiseAcrossThreadCounts) {
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "AdamW amsgrad" : "Adam");
    expect_thread_invariant<float>([amsgrad] {
      Tensor<float> p = leaf<float>({100003}, 1);
      const Tensor<float> c(random_array<float>({100003}, 2));
      std::unique_ptr<optim::Optimizer<float>> opt;
      if (amsgrad) opt = std::make_unique<optim::AdamW<float>>(std::vector<Tensor<float>>{p},
                                                                  optim::AdamWOptions(1e-2).amsgrad(true));
      else opt = std::make_unique<optim::Adam<float>>(std::vector<Tensor<float>>{p},
                                                      optim::AdamOptions(1e-2).weight_decay(0.1));
      for (int step = 0; step < 3; ++step) {
        opt->zero_grad();
        sum(p * p * c).backward();  // gradient 2 p c, elementwise
        opt->step();
      }
      return Arrays<float>{p.value()};
    });
  }
}

// ---- a whole model --------------------------------------------------------------------------------

TEST(Parallel, TransformerEncoderTrainingStepAcrossThreadCounts) {
  manual_seed(0);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
      nn::TransformerEncoderLayerOptions(64, 4).dim_feedforward(128).dropout(0.0).activation("gelu")
          .batch_first(true).norm_first(true));
  nn::TransformerEncoder<float> enc(layer, 2);
  BoolArray padding = BoolArray::from_shape({8, 32});
  for (std::size_t i = 0; i < padding.size(); ++i) padding.data()[i] = i % 32 >= 28 && i / 32 % 2 == 1;
  const Tensor<float> x(random_array<float>({8, 32, 64}, 1)), target(random_array<float>({8, 32, 64}, 2));
  const auto params = enc.named_parameters();
  ASSERT_EQ(params.size(), 2u * 12);  // per layer: in/out proj, linear1/2, norm1/2, weights and biases
  expect_thread_invariant<float>([&] {
    enc.zero_grad(true);
    Tensor<float> loss = mse_loss(enc.forward(x, {}, AttnMask<float>(padding)), target);
    loss.backward();
    Arrays<float> r{loss.value()};
    for (const auto& [name, p] : params) r.push_back(p.grad());
    return r;
  }, std::vector<double>(params.size() + 1, 1e-5), {2});
}
