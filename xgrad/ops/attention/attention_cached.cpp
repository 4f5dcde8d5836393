// The attention op's cached decode path (attention.hpp: attention_cached), the third member of the
// family beside the materialized (attention.cpp) and tiled (attention_tiled.cpp) paths: the t new
// queries of a KV cache's decode step against its S = start + t keys, two gemms per batch-head over
// the cache's buffers (a query head reading its KV head in place under grouped-query attention), the probabilities by
// the rule the other paths follow (attention_kernels.hpp). Inference only: no node is recorded.
#include <xgrad/ops/attention/attention_kernels.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/gemm.hpp>
#include <xgrad/backend/parallel.hpp>

namespace xgrad::detail {

template <class T>
Array<T> attention_cached(const CachedAttention<T>& a) {
  const std::size_t N = a.batch, H = a.heads, d = a.head_dim, t = a.new_positions, start = a.start;
  const std::size_t kv_heads = a.kv_heads ? a.kv_heads : H;
  XGRAD_CHECK(kv_heads == H || (kv_heads > 0 && H % kv_heads == 0), a.who, ": the query heads (", H,
              ") must be a multiple of the cached key/value heads (", kv_heads, ")");
  const std::size_t E = H * d, S = start + t, G = kv_heads ? H / kv_heads : 1;  // G: query heads per KV head
  Array<T> out = empty_array<T>({N, t, E}, a.who);
  const T scale = T(1) / std::sqrt(static_cast<T>(d));
  // Under autocast the products run in bf16, as in the full forward's attention; decided here, on
  // the caller's thread, not on the pool's.
  const bool bf16 = autocast_gemm<T>();
  const std::size_t work = std::max<std::size_t>(1, t * S * d);  // multiply-adds per batch-head, per gemm
  parallel_for(N * H, std::max<std::size_t>(1, (1u << 15) / work), [&](std::size_t begin, std::size_t end) {
    std::vector<T> scores(t * S);  // (t, S)
    for (std::size_t nh = begin; nh < end; ++nh) {
      const std::size_t n = nh / H, hh = nh % H;
      const std::size_t kv = n * kv_heads + hh / G;  // the KV head this query head reads
      const T* k = a.k + kv * a.capacity * d;
      const T* v = a.v + kv * a.capacity * d;
      T* o = out.data() + n * t * E + hh * d;
      gemm_autocast<T>(bf16, false, true, t, S, d, scale, a.q + n * t * a.q_row_stride + hh * d, a.q_row_stride, k, d,
                       T(0), scores.data(), S);
      // P = softmax over the visible keys, by the rule of every path, so that Inf and NaN come out
      // as on the full forward; 0 for the keys causality hides
      for (std::size_t i = 0; i < t; ++i) {
        T* row = scores.data() + i * S;
        const std::size_t visible = start + i + 1;
        softmax_row(row, visible);
        std::fill(row + visible, row + S, T(0));
      }
      // O = P V: a probability 0 reads nothing of its value (a hidden NaN value stays hidden)
      if (a.values_may_be_nonfinite)
        gemm_zeros_pass_nothing<T>(bf16, false, t, d, S, T(1), scores.data(), S, v, d, T(0), o, E);
      else
        gemm_autocast<T>(bf16, false, false, t, d, S, T(1), scores.data(), S, v, d, T(0), o, E);
    }
  });
  return out;
}

template Array<float> attention_cached<float>(const CachedAttention<float>&);
template Array<double> attention_cached<double>(const CachedAttention<double>&);

}  // namespace xgrad::detail
