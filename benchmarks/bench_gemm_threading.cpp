// bench_gemm_threading: for the float32 gemm shapes of bench_train_step's medium and large
// training steps, the rate of xgrad's row-block split over its pool (one single-threaded oneDNN
// call per block: the library's rule) against one oneDNN call on oneDNN's own OpenMP threads, at
// the same thread count, alternating, twice each; and the 1-thread rate. The measurement behind
// detail::onednn_own_threading_min_macs() (README, "Threads and OpenMP").
//
//   bench_gemm_threading [--threads N]        (default 2)
//   OMP_WAIT_POLICY=passive bench_gemm_threading   OpenMP's workers sleep instead of spinning
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/onednn.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using Clock = std::chrono::steady_clock;

// GFLOP/s of f over at least 0.5 s and 5 calls, after 2 warm-up calls.
template <class F>
double rate(const F& f, double flops) {
  f();
  f();
  int reps = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < 0.5 || reps < 5) {
    f();
    ++reps;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  return flops * reps / elapsed / 1e9;
}

struct Shape {
  std::size_t m, n, k;
  bool ta, tb;
  const char* what;
};

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gemm_threading [--threads N]\n");
      return 2;
    }
  }
  xgrad::set_gemm_backend(xgrad::GemmBackend::onednn);
  const std::vector<Shape> shapes = {
      {1024, 1024, 1024, false, false, "square 1024"},   {1024, 1536, 512, false, true, "large qkv fwd"},
      {1024, 2048, 512, false, true, "large ff1 fwd"},   {1024, 512, 2048, false, true, "large ff2 fwd"},
      {1024, 512, 2048, false, false, "large ff1 dX"},   {512, 2048, 1024, true, false, "large ff1 dW"},
      {2048, 768, 256, false, true, "medium qkv fwd"},   {2048, 1024, 256, false, true, "medium ff1 fwd"},
      {256, 1024, 2048, true, false, "medium ff1 dW"},   {512, 256, 256, false, true, "small 512x256x256"},
      {512, 64, 256, false, true, "small 512x64x256"}};
  const std::size_t rule = xgrad::detail::onednn_own_threading_min_macs();
  std::printf("oneDNN ISA %s, %d threads; GFLOP/s (two alternating runs each)\n",
              xgrad::detail::onednn_isa().c_str(), threads);
  std::printf("%-18s %5s %5s %5s %10s  %15s  %15s  %8s\n", "shape", "m", "n", "k", "macs", "pool split",
              "oneDNN threads", "1 thread");
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k, 0.5f), b(s.k * s.n, 0.25f), c(s.m * s.n);
    const auto call = [&] {
      xgrad::detail::gemm<float>(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a.data(), s.ta ? s.m : s.k, b.data(),
                                 s.tb ? s.k : s.n, 0.0f, c.data(), s.n);
    };
    const double flops = 2.0 * double(s.m) * s.n * s.k;
    double split[2], own[2];
    xgrad::set_num_threads(threads);
    for (int rep = 0; rep < 2; ++rep) {
      xgrad::detail::set_onednn_own_threading_min_macs(SIZE_MAX);
      split[rep] = rate(call, flops);
      xgrad::detail::set_onednn_own_threading_min_macs(0);
      own[rep] = rate(call, flops);
    }
    xgrad::detail::set_onednn_own_threading_min_macs(rule);
    xgrad::set_num_threads(1);
    const double one = rate(call, flops);
    std::printf("%-18s %5zu %5zu %5zu %10.3g  %7.1f %7.1f  %7.1f %7.1f  %8.1f\n", s.what, s.m, s.n, s.k, flops / 2,
                split[0], split[1], own[0], own[1], one);
  }
  return 0;
}
