// The attention op's cached decode path (ops/attention/attention.hpp: detail::attention_cached), called
// directly on KV-cache-shaped buffers: t new queries read from an (N, t, 3E) projection, keys and
// values from (N, H, capacity, d) buffers holding start + t positions. It must give the last t
// query rows of a causal scaled_dot_product_attention over all start + t positions (the
// materialized path), with the same NaN positions, NaN and Inf placed in hidden value rows
// included (they stay hidden).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include <xgrad/ops/attention/attention.hpp>

#include "test_util.hpp"

using namespace xgrad;

namespace {

// One case: N sequences, H heads of size d, `start` cached positions then t new ones. `poison`:
// a NaN and an Inf in value rows only later queries see (position start + 1, start + t - 1).
template <class T>
void check_against_full_attention(std::size_t N, std::size_t H, std::size_t d, std::size_t start, std::size_t t,
                                  std::size_t capacity, bool poison, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "N " << N << " H " << H << " d " << d << " start " << start << " t " << t
                                    << " capacity " << capacity << (poison ? " poisoned" : ""));
  const std::size_t E = H * d, S = start + t;
  Generator g(seed);
  // q, k, v of every position, (N, H, S, d)
  Tensor<T> q = randn<T>({N, H, S, d}, g), k = randn<T>({N, H, S, d}, g), v = randn<T>({N, H, S, d}, g);
  if (poison && t >= 2) {
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h) {
        v.mutable_value()(n, h, start + 1, 0) = std::numeric_limits<T>::quiet_NaN();
        v.mutable_value()(n, h, start + t - 1, d - 1) = std::numeric_limits<T>::infinity();
      }
  }
  const Tensor<T> full = scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);  // (N, H, S, d)

  // The cache's layout: the new queries as the q block of an (N, t, 3E) projection (k and v
  // blocks filled with garbage the kernel must not read), keys and values in (N, H, capacity, d).
  std::vector<T> qkv(N * t * 3 * E, std::numeric_limits<T>::quiet_NaN());
  std::vector<T> kc(N * H * capacity * d, std::numeric_limits<T>::quiet_NaN()), vc(kc);
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t h = 0; h < H; ++h) {
      for (std::size_t i = 0; i < t; ++i)
        for (std::size_t c = 0; c < d; ++c) qkv[(n * t + i) * 3 * E + h * d + c] = q.value()(n, h, start + i, c);
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t c = 0; c < d; ++c) {
          kc[((n * H + h) * capacity + j) * d + c] = k.value()(n, h, j, c);
          vc[((n * H + h) * capacity + j) * d + c] = v.value()(n, h, j, c);
        }
    }
  detail::CachedAttention<T> a;
  a.batch = N;
  a.heads = H;
  a.head_dim = d;
  a.start = start;
  a.new_positions = t;
  a.q = qkv.data();
  a.q_row_stride = 3 * E;
  a.k = kc.data();
  a.v = vc.data();
  a.capacity = capacity;
  a.values_may_be_nonfinite = poison;
  const Array<T> out = detail::attention_cached(a);  // (N, t, E)
  ASSERT_EQ(out.shape(), (Shape{N, t, E}));

  const double tolerance = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t c = 0; c < d; ++c) {
          const double got = out(n, i, h * d + c), want = full.value()(n, h, start + i, c);
          if (std::isnan(want) || std::isinf(want)) {
            EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want)
                << "(" << n << ", " << i << ", " << h << ", " << c << "): got " << got << ", want " << want;
          } else {
            EXPECT_NEAR(got, want, tolerance * std::max(1.0, std::abs(want)))
                << "(" << n << ", " << i << ", " << h << ", " << c << ")";
          }
        }
  if (poison && t >= 2) {
    // the first new query sees neither poisoned row: its output is finite
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t c = 0; c < E; ++c) EXPECT_TRUE(std::isfinite(out(n, 0, c))) << "(" << n << ", 0, " << c << ")";
  }
}

}  // namespace

TEST(AttentionCached, EqualsTheLastRowsOfTheFullCausalAttentionInDouble) {
  check_against_full_attention<double>(2, 3, 4, 5, 1, 6, false, 1);   // one decode step
  check_against_full_attention<double>(2, 3, 4, 0, 7, 9, false, 2);   // prefill
  check_against_full_attention<double>(1, 2, 8, 6, 4, 16, false, 3);  // a chunk after a prefix
  check_against_full_attention<double>(2, 2, 4, 3, 5, 8, true, 4);    // NaN and Inf values, hidden from query 0
}

TEST(AttentionCached, EqualsTheLastRowsOfTheFullCausalAttentionInFloat) {
  check_against_full_attention<float>(2, 4, 16, 40, 1, 64, false, 5);  // oneDNN-sized products
  check_against_full_attention<float>(3, 2, 8, 9, 6, 15, false, 6);
  check_against_full_attention<float>(2, 2, 4, 3, 5, 8, true, 7);
}
