// The gemm backend switch (oneDNN / OpenBLAS), oneDNN's float32 gemm against a double reference,
// thread governance and run-to-run determinism, and oneDNN's bf16 gemm against a double
// reference on bf16-rounded operands.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <xgrad/backend/bf16.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using xgrad::GemmBackend;

// Restores the backend and thread count a test changes.
struct Restore {
  GemmBackend backend = xgrad::get_gemm_backend();
  int threads = xgrad::get_num_threads();
  ~Restore() {
    xgrad::set_gemm_backend(backend);
    xgrad::set_num_threads(threads);
  }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// Round to nearest even to bfloat16, independently of the library's conversion.
float bf16_round(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t lower = u & 0xffffu, upper = u & 0xffff0000u;
  std::uint32_t r = upper;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 0x10000u))) r += 0x10000u;
  float y;
  std::memcpy(&y, &r, sizeof y);
  return y;
}

// One product: sizes, transposes, padded leading dimensions, alpha and beta.
struct Case {
  bool ta, tb;
  std::size_t m, n, k, pad;
  float alpha, beta;
};

struct Operands {
  std::size_t lda, ldb, ldc;
  std::vector<float> a, b, c;
};

Operands make_operands(const Case& t, unsigned seed) {
  Operands o;
  o.lda = (t.ta ? t.m : t.k) + t.pad;
  o.ldb = (t.tb ? t.k : t.n) + t.pad;
  o.ldc = t.n + t.pad;
  o.a = random_floats((t.ta ? t.k : t.m) * o.lda, seed);
  o.b = random_floats((t.tb ? t.n : t.k) * o.ldb, seed + 1);
  o.c = random_floats(t.m * o.ldc, seed + 2);
  return o;
}

// Checks c against alpha op(A) op(B) + beta C0 computed in double from round(A), round(B): each
// element within tol of the sum of the magnitudes of its terms.
void expect_close(const Case& t, const Operands& o, const std::vector<float>& c, float (*round)(float), double tol) {
  double worst = 0;
  for (std::size_t i = 0; i < t.m; ++i)
    for (std::size_t j = 0; j < t.n; ++j) {
      double sum = 0, mag = 0;
      for (std::size_t p = 0; p < t.k; ++p) {
        const double x = round(t.ta ? o.a[p * o.lda + i] : o.a[i * o.lda + p]);
        const double y = round(t.tb ? o.b[j * o.ldb + p] : o.b[p * o.ldb + j]);
        sum += x * y;
        mag += std::abs(x * y);
      }
      const double c0 = o.c[i * o.ldc + j];
      const double want = t.alpha * sum + (t.beta == 0.0f ? 0.0 : t.beta * c0);
      const double scale = std::abs(t.alpha) * mag + std::abs(t.beta * c0) + 1e-30;
      worst = std::max(worst, std::abs(c[i * o.ldc + j] - want) / scale);
    }
  EXPECT_LE(worst, tol) << "m=" << t.m << " n=" << t.n << " k=" << t.k << " ta=" << t.ta << " tb=" << t.tb
                        << " alpha=" << t.alpha << " beta=" << t.beta;
  // The padding of C is never written.
  for (std::size_t i = 0; i < t.m; ++i)
    for (std::size_t j = t.n; j < o.ldc; ++j) ASSERT_EQ(c[i * o.ldc + j], o.c[i * o.ldc + j]);
}

float identity(float x) { return x; }

const std::vector<Case> kCases = {
    {false, false, 1, 1, 1, 0, 1.0f, 0.0f},      {false, true, 7, 5, 3, 2, 1.0f, 0.0f},
    {true, false, 13, 9, 17, 1, 0.5f, 1.0f},     {true, true, 33, 31, 65, 3, -2.0f, 0.25f},
    {false, true, 128, 128, 64, 0, 1.0f, 0.0f},  {true, false, 64, 300, 96, 5, 1.0f, 1.0f},
    {false, false, 257, 129, 70, 0, 1.0f, 0.0f},  // >= 1M multiply-adds: split over the pool
    {false, true, 96, 520, 48, 4, 1.0f, 0.0f},    // n > m: split along the columns
    {true, false, 80, 600, 40, 3, 1.0f, 0.5f},    // the same with A transposed and B not
};

TEST(GemmBackend, SetGetAndNames) {
  Restore restore;
  xgrad::set_gemm_backend(GemmBackend::openblas);
  EXPECT_EQ(xgrad::get_gemm_backend(), GemmBackend::openblas);
  xgrad::set_gemm_backend(GemmBackend::onednn);
  EXPECT_EQ(xgrad::get_gemm_backend(), GemmBackend::onednn);
  EXPECT_STREQ(xgrad::gemm_backend_name(GemmBackend::onednn), "onednn");
  EXPECT_STREQ(xgrad::gemm_backend_name(GemmBackend::openblas), "openblas");
  EXPECT_THROW(xgrad::set_gemm_backend(static_cast<GemmBackend>(7)), std::invalid_argument);
}

TEST(GemmBackend, DefaultIsOneDnnOrTheEnvironmentVariable) {
  const char* env = std::getenv("XGRAD_GEMM_BACKEND");
  // This process's backend has not been set yet when the test runs alone (ctest runs each test
  // in its own process); under a filter with other tests first it may have been.
  Restore restore;
  const GemmBackend want =
      env != nullptr && std::string(env) == "openblas" ? GemmBackend::openblas : GemmBackend::onednn;
  EXPECT_EQ(xgrad::get_gemm_backend(), want);
}

TEST(GemmBackendDeathTest, BadEnvironmentValueNamesIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: the variable is read there
  EXPECT_EXIT(
      {
        setenv("XGRAD_GEMM_BACKEND", "mkl", 1);
        try {
          xgrad::get_gemm_backend();
        } catch (const std::invalid_argument& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      testing::ExitedWithCode(3), "XGRAD_GEMM_BACKEND: expected \"onednn\" or \"openblas\", got \"mkl\"");
}

TEST(GemmBackend, BothFloat32BackendsMatchADoubleReference) {
  Restore restore;
  for (int threads : {1, 2}) {
    xgrad::set_num_threads(threads);
    for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas}) {
      xgrad::set_gemm_backend(backend);
      unsigned seed = 10;
      for (const Case& t : kCases) {
        Operands o = make_operands(t, seed += 3);
        std::vector<float> c = o.c;
        xgrad::detail::gemm<float>(t.ta, t.tb, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda, o.b.data(), o.ldb, t.beta,
                                   c.data(), o.ldc);
        SCOPED_TRACE(std::string(xgrad::gemm_backend_name(backend)) + ", threads " + std::to_string(threads));
        expect_close(t, o, c, identity, 1e-6);
      }
    }
  }
}

TEST(GemmBackend, OneDnnCallInsideAPoolChunkLeavesTheOpenMpCountAlone) {
  Restore restore;
  xgrad::set_num_threads(2);
  xgrad::set_gemm_backend(GemmBackend::onednn);
  const Case t{false, false, 256, 256, 64, 0, 1.0f, 0.0f};  // split over the pool
  Operands o = make_operands(t, 7);
  const int before = omp_get_max_threads();
  xgrad::detail::gemm<float>(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                             o.c.data(), o.ldc);
  EXPECT_EQ(omp_get_max_threads(), before);  // each call's 1 thread was restored
}

// Threads of this process, from /proc/self/status.
int process_threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

TEST(GemmBackend, OneDnnStartsNoOpenMpTeam) {
  // Every oneDNN call runs on one OpenMP thread inside xgrad's pool, so no OpenMP worker exists
  // to spin against the pool: the process has exactly the pool's threads.
  Restore restore;
  xgrad::set_gemm_backend(GemmBackend::onednn);
  xgrad::set_num_threads(2);
  const int before = process_threads();
  for (std::size_t n : {64, 256, 512}) {
    const Case t{false, true, n, n, n, 0, 1.0f, 0.0f};
    Operands o = make_operands(t, 3);
    xgrad::detail::gemm<float>(t.ta, t.tb, n, n, n, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f, o.c.data(),
                               o.ldc);
  }
  EXPECT_EQ(process_threads(), before);
}

// A fixed thread count gives bit-identical products, call after call (exact resume relies on it).
TEST(GemmBackend, BitIdenticalForAFixedThreadCount) {
  Restore restore;
  for (GemmBackend backend : {GemmBackend::onednn, GemmBackend::openblas})
      for (int threads : {1, 2}) {
        xgrad::set_gemm_backend(backend);
        xgrad::set_num_threads(threads);
        const Case t{false, true, 300, 200, 500, 0, 1.0f, 0.0f};
        Operands o = make_operands(t, 21);
        std::vector<float> first;
        for (int rep = 0; rep < 4; ++rep) {
          std::vector<float> c(o.c.size(), 0.0f);
          xgrad::detail::gemm<float>(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                                     c.data(), o.ldc);
          if (rep == 0) first = c;
          else ASSERT_EQ(std::memcmp(first.data(), c.data(), c.size() * sizeof(float)), 0)
              << xgrad::gemm_backend_name(backend) << ", threads " << threads;
        }
      }
}

// ---- bf16 ----------------------------------------------------------------------------------

bool cpu_flag(const std::string& flag) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string word;
  while (cpuinfo >> word)
    if (word == flag) return true;
  return false;
}

TEST(OneDnnBf16, IsaIsNamedAndBf16NativeFollowsTheCpu) {
  const std::string isa = xgrad::detail::onednn_isa();
  EXPECT_FALSE(isa.empty());
  if (cpu_flag("avx512_bf16") && cpu_flag("avx512bw") && cpu_flag("avx512vl")) {
    EXPECT_TRUE(xgrad::detail::onednn_bf16_native()) << isa;
  } else {
    EXPECT_FALSE(xgrad::detail::onednn_bf16_native()) << isa;
  }
  EXPECT_EQ(xgrad::detail::onednn_bf16_native(), isa == "avx512_core_bf16" || isa == "avx512_core_amx");
}

TEST(OneDnnBf16, MatchesADoubleReferenceOnBf16RoundedOperands) {
  Restore restore;
  for (int threads : {1, 2}) {
    xgrad::set_num_threads(threads);
    unsigned seed = 100;
    for (const Case& t : kCases) {
      Operands o = make_operands(t, seed += 3);
      std::vector<float> c = o.c;
      const bool ran = xgrad::detail::onednn_gemm_bf16(t.ta, t.tb, t.m, t.n, t.k, t.alpha, o.a.data(), o.lda,
                                                       o.b.data(), o.ldb, t.beta, c.data(), o.ldc);
      if (!ran) {
        // Only a CPU below AVX-512 may lack oneDNN's bf16 matmul; C is then untouched.
        EXPECT_FALSE(cpu_flag("avx512bw")) << xgrad::detail::onednn_isa();
        EXPECT_EQ(c, o.c);
        continue;
      }
      SCOPED_TRACE("threads " + std::to_string(threads));
      // Products of bf16 values are exact in fp32; only the fp32 accumulation rounds.
      expect_close(t, o, c, bf16_round, 1e-5);
    }
  }
}

TEST(OneDnnBf16, RoundsToNearestEvenNotTruncates) {
  // Near 1 a bf16 step is 2^-7. 1 + 1.5 steps is a tie that goes to the even 1 + 2 steps; 1 + a
  // little over half a step goes up to 1 + 2^-7. Truncation would give 1 + 2^-7 and 1.
  const float a[2] = {1.0f + 3.0f / 256.0f, 1.0f + 1.0f / 256.0f + 1.0f / 65536.0f};
  const float b[2] = {1.0f, 1.0f};
  float c[2] = {0, 0};
  if (!xgrad::detail::onednn_gemm_bf16(false, false, 2, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c, 1)) GTEST_SKIP();
  EXPECT_EQ(c[0], bf16_round(a[0]));
  EXPECT_EQ(c[0], 1.0f + 1.0f / 64.0f);
  EXPECT_EQ(c[1], 1.0f + 1.0f / 128.0f);
}

TEST(OneDnnBf16, BitIdenticalForAFixedThreadCount) {
  Restore restore;
  xgrad::set_num_threads(2);
  const Case t{false, true, 300, 200, 500, 0, 1.0f, 0.0f};
  Operands o = make_operands(t, 33);
  std::vector<float> first;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> c(o.c.size(), 0.0f);
    if (!xgrad::detail::onednn_gemm_bf16(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                                         c.data(), o.ldc))
      GTEST_SKIP() << "no oneDNN bf16 matmul on " << xgrad::detail::onednn_isa();
    if (rep == 0) first = c;
    else ASSERT_EQ(std::memcmp(first.data(), c.data(), c.size() * sizeof(float)), 0);
  }
}

// Autocast's gemm_bf16 takes oneDNN's kernel under the oneDNN backend (bit for bit the same
// product) and says so; under OpenBLAS it takes the portable path.
TEST(OneDnnBf16, AutocastGemmUsesItUnderTheOneDnnBackend) {
  Restore restore;
  xgrad::set_num_threads(2);
  const Case t{false, true, 200, 150, 300, 1, 1.0f, 0.0f};
  Operands o = make_operands(t, 77);
  std::vector<float> kernel = o.c, routed = o.c;
  if (!xgrad::detail::onednn_gemm_bf16(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                                       kernel.data(), o.ldc)) {
    xgrad::set_gemm_backend(GemmBackend::onednn);
    EXPECT_EQ(std::string(xgrad::detail::bf16_gemm_path()).rfind("portable", 0), 0u);
    GTEST_SKIP() << "no oneDNN bf16 matmul on " << xgrad::detail::onednn_isa();
  }
  xgrad::set_gemm_backend(GemmBackend::onednn);
  xgrad::detail::gemm_bf16(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                           routed.data(), o.ldc);
  EXPECT_EQ(std::memcmp(kernel.data(), routed.data(), kernel.size() * sizeof(float)), 0);
  const std::string path = xgrad::detail::bf16_gemm_path();
  EXPECT_EQ(path.rfind("oneDNN bf16 matmul (" + xgrad::detail::onednn_isa(), 0), 0u) << path;
  xgrad::set_gemm_backend(GemmBackend::openblas);
  EXPECT_EQ(std::string(xgrad::detail::bf16_gemm_path()).rfind("portable", 0), 0u);
  std::vector<float> portable = o.c;
  xgrad::detail::gemm_bf16(t.ta, t.tb, t.m, t.n, t.k, 1.0f, o.a.data(), o.lda, o.b.data(), o.ldb, 0.0f,
                           portable.data(), o.ldc);
  expect_close(t, o, portable, bf16_round, 1e-5);
}

}  // namespace
