// Long-context attention: scaled_dot_product_attention forward + backward at (1, heads, L, dim)
// float32 on one path (tiled or materialized), its step time, GFLOP/s and peak RSS growth, and the
// machine's sgemm rate in the same process, so the step reads as a fraction of what the gemm can
// do. One configuration per process, so that the peak RSS is that configuration's alone
// (benchmarks/attention_long.sh runs the table of docs/performance.md).
//
//   bench_attention_long --path tiled --L 4096 [--heads 12] [--dim 64] [--causal 1] [--dropout 0]
//                        [--threads 2] [--reps 3] [--no-gemm] [--tiles Q,K]
//                        [--kv-heads H] [--expand-kv 0]
//
// --kv-heads H (a divisor of --heads): grouped-query attention, k and v with H heads, through
// enable_gqa; with --expand-kv 1 the step instead repeats k and v to every query head first
// (unsqueeze, expand, reshape: what a caller without enable_gqa writes) and runs plain attention.
//
// FLOPs: 12 L^2 E per head for forward + backward (2 L^2 E multiply-adds forward, 4 backward,
// 2 flops each), half of it when causal, the count the materialized path needs (the tiled
// backward recomputes q k^T: 14 L^2 E flops of work, counted as 12). Prints one line of JSON.
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <xgrad/backend/gemm.hpp>
#include <xgrad/ops/attention/attention_kernels.hpp>

using xgrad::bench::seconds_since;
using xgrad::bench::peak_rss_mib;

namespace {

struct Options {
  std::string path = "tiled";
  std::size_t L = 1024, heads = 12, dim = 64, reps = 3, query_rows = 0, key_rows = 0, kv_heads = 0;
  bool causal = true, gemm = true, expand_kv = false;
  double dropout = 0.0;
  int threads = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::size_t> tiles;
  CLI::App app{"Long-context scaled_dot_product_attention forward + backward on one path."};
  app.add_option("--path", o.path)->check(CLI::IsMember({"tiled", "materialized"}))->capture_default_str();
  app.add_option("--L", o.L)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--heads", o.heads)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--dim", o.dim)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--reps", o.reps)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--causal", o.causal)->capture_default_str();
  app.add_option("--dropout", o.dropout)->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--threads", o.threads)->check(CLI::Range(1, 100000000))->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads, "key/value heads (grouped-query attention); default --heads")
      ->check(CLI::Range(1, 100000000));
  app.add_option("--expand-kv", o.expand_kv, "repeat k and v to every query head instead of enable_gqa")
      ->capture_default_str();
  app.add_flag("--no-gemm", "skip the sgemm rate measurement")->each([&](const std::string&) { o.gemm = false; });
  app.add_option("--tiles", tiles, "Q,K: the tiled path's query and key block rows")
      ->delimiter(',')
      ->expected(2)
      ->check(CLI::Range(1, 100000000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.heads % o.kv_heads != 0) {
    std::fprintf(stderr, "--kv-heads %zu must divide --heads %zu\n", o.kv_heads, o.heads);
    std::exit(2);
  }
  if (tiles.size() == 2) {
    o.query_rows = tiles[0];
    o.key_rows = tiles[1];
  }
  return o;
}

// sgemm 1024^3 through xgrad's gemm entry point (the pool's split, oneDNN by default): best of 5.
double sgemm_gflops() {
  const std::size_t n = 1024;
  xgrad::Generator g(1);
  const auto a = xgrad::randn<float>({n, n}, g).value(), b = xgrad::randn<float>({n, n}, g).value();
  std::vector<float> c(n * n);
  double best = 1e30;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    xgrad::detail::gemm<float>(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (r > 0) best = std::min(best, seconds_since(t0));  // the first call warms up
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  xgrad::set_num_threads(o.threads);
  xgrad::set_attention_path(o.path == "tiled" ? xgrad::AttentionPath::Tiled : xgrad::AttentionPath::Materialized);
  xgrad::detail::set_attention_tiles(o.query_rows, o.key_rows);

  xgrad::Generator g(1);
  const xgrad::Shape shape{1, o.heads, o.L, o.dim}, kv_shape{1, o.kv_heads, o.L, o.dim};
  xgrad::Tensor<float> q = xgrad::randn<float>(shape, g, true), k = xgrad::randn<float>(kv_shape, g, true),
                       v = xgrad::randn<float>(kv_shape, g, true);
  const bool gqa = o.kv_heads != o.heads;
  // (1, Hkv, L, d) -> (1, Hq, L, d), each key/value head repeated for its query heads
  const auto i64 = [](std::size_t x) { return static_cast<std::int64_t>(x); };
  auto repeat_kv = [&](const xgrad::Tensor<float>& x) {
    return xgrad::reshape(
        xgrad::expand(xgrad::unsqueeze(x, 2), {1, i64(o.kv_heads), i64(o.heads / o.kv_heads), i64(o.L), i64(o.dim)}),
        {1, i64(o.heads), i64(o.L), i64(o.dim)});
  };
  const xgrad::Tensor<float> upstream = xgrad::randn<float>(shape, g);
  const double rss_before = peak_rss_mib();

  std::vector<double> times;
  for (std::size_t r = 0; r < o.reps; ++r) {
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
    const auto t0 = std::chrono::steady_clock::now();
    xgrad::Tensor<float> y =
        gqa && o.expand_kv ? xgrad::scaled_dot_product_attention(q, repeat_kv(k), repeat_kv(v), {}, o.dropout, o.causal)
                           : xgrad::scaled_dot_product_attention(q, k, v, {}, o.dropout, o.causal, std::nullopt, gqa);
    xgrad::sum(y * upstream).backward();
    times.push_back(seconds_since(t0));
  }
  const double rss_growth = peak_rss_mib() - rss_before;
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  const double flops = 12.0 * o.heads * double(o.L) * double(o.L) * double(o.dim) * (o.causal ? 0.5 : 1.0);
  const double gflops = flops / median / 1e9;
  const double gemm = o.gemm ? sgemm_gflops() : 0.0;
  // The state the backward keeps besides q, k, v and O: P (and the dropout multipliers) on the
  // materialized path, one float log-sum-exp per query on the tiled one.
  const double saved_mib = o.path == "tiled" ? 4.0 * o.heads * o.L / 1048576.0
                                             : 4.0 * o.heads * o.L * o.L * (o.dropout > 0 ? 2 : 1) / 1048576.0;
  std::printf(
      "{\"path\":\"%s\",\"L\":%zu,\"heads\":%zu,\"kv_heads\":%zu,\"expand_kv\":%d,\"dim\":%zu,"
      "\"causal\":%d,\"dropout\":%g,\"threads\":%d,"
      "\"median_s\":%.4f,\"min_s\":%.4f,\"gflops\":%.2f,\"sgemm_gflops\":%.1f,\"of_sgemm\":%.4f,"
      "\"rss_growth_mib\":%.1f,\"saved_mib\":%.3f}\n",
      o.path.c_str(), o.L, o.heads, o.kv_heads, o.expand_kv && gqa ? 1 : 0, o.dim, o.causal ? 1 : 0, o.dropout,
      o.threads, median, times.front(), gflops, gemm, gemm > 0 ? gflops / gemm : 0.0, rss_growth, saved_mib);
  return 0;
}
