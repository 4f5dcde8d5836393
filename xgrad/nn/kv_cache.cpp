// KVCache and forward_cached (kv_cache.hpp): a TransformerEncoderLayer's causal forward for the
// newest positions only, reusing the keys and values of the earlier ones. The layer's own
// submodules compute everything but the attention (norms, projections, feed-forward, all per
// position); the attention of the t new queries against the S = length + t cached keys is the
// attention op's cached decode path (ops/attention/attention.hpp: attention_cached).
#include <xgrad/nn/kv_cache.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/ops/attention/attention.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::nn {

// ---- KVCache ------------------------------------------------------------------------------------

namespace {

// "layer 1 of the TransformerEncoder at 0x..." or "the TransformerEncoderLayer at 0x...".
template <class Owner>
std::string describe(const Owner& o) {
  std::ostringstream s;
  if (o.encoder)
    s << "layer " << o.index << " of the TransformerEncoder at " << o.encoder;
  else
    s << "the " << o.kind << " at " << o.layer;
  return s.str();
}

}  // namespace

template <class T>
void KVCache<T>::clear() {
  length_ = 0;
  in_use_ = false;
  reserved_ = 0;
  nonfinite_values_ = false;
  owner_ = Owner();
}

template <class T>
void KVCache<T>::crop(std::int64_t length) {
  XGRAD_CHECK(length >= 0 && length <= length_, "KVCache::crop: length must be in [0, ", length_,
              "] (the positions cached), got ", length);
  length_ = length;
  if (length_ == 0) nonfinite_values_ = false;
}

template <class T>
void KVCache<T>::reserve(std::int64_t capacity) {
  XGRAD_CHECK(capacity >= 0, "KVCache::reserve: capacity must be >= 0, got ", capacity);
  if (in_use_ && capacity > capacity_) grow(static_cast<std::size_t>(capacity));  // throws: nothing changed
  reserved_ = std::max(reserved_, capacity);
}

template <class T>
void KVCache<T>::grow(std::size_t capacity) {
  const Shape shape{batch_, heads_, capacity, head_dim_};
  Array<T> k = empty_array<T>(shape, "KVCache"), v = empty_array<T>(shape, "KVCache");
  const std::size_t rows = static_cast<std::size_t>(length_) * head_dim_;  // cached values per head
  for (std::size_t n = 0; n < batch_; ++n)
    for (std::size_t h = 0; h < heads_; ++h) {
      const std::size_t to = (n * heads_ + h) * capacity * head_dim_;
      if (rows == 0) continue;
      std::memcpy(k.data() + to, key(n, h, 0), rows * sizeof(T));
      std::memcpy(v.data() + to, value(n, h, 0), rows * sizeof(T));
    }
  k_ = std::move(k);
  v_ = std::move(v);
  capacity_ = static_cast<std::int64_t>(capacity);
}

template <class T>
Array<T> KVCache<T>::copy_of(const Array<T>& buffer) const {
  const std::size_t length = static_cast<std::size_t>(length_);
  const std::size_t batch = in_use_ ? batch_ : 0;
  Array<T> out = empty_array<T>({batch, heads_, length, head_dim_}, "KVCache");
  for (std::size_t nh = 0; nh < batch * heads_; ++nh)
    std::copy_n(buffer.data() + nh * static_cast<std::size_t>(capacity_) * head_dim_, length * head_dim_,
                out.data() + nh * length * head_dim_);
  return out;
}

template <class T>
std::int64_t KVCache<T>::prepare(const char* who, const Owner& owner, std::size_t batch, std::size_t heads,
                                 std::size_t head_dim, bool batch_first, std::size_t t) {
  if (in_use_) {
    XGRAD_CHECK(owner.layer == owner_.layer, who, ": this cache holds the keys and values of ", describe(owner_),
                ", not of ", describe(owner), " (use one cache per layer, or clear() it first)");
    XGRAD_CHECK(batch_first == batch_first_, who,
                ": layout mismatch: the cache holds the keys of a batch_first=", batch_first_ ? "true" : "false",
                " layer, this layer has batch_first=", batch_first ? "true" : "false",
                " (use one cache per layer, or clear() it)");
    XGRAD_CHECK(batch == batch_, who, ": x_new holds ", batch, " sequences but the cache holds ", batch_,
                " (x_new must be ", batch_first ? "(N, t, E)" : "(t, N, E)", " for this layer; clear() the cache ",
                "to start another batch)");
    XGRAD_CHECK(heads == heads_ && head_dim == head_dim_, who, ": the cache holds ", heads_, " heads of size ",
                head_dim_, ", this layer has ", heads, " of size ", head_dim, " (use one cache per layer)");
    const auto needed = static_cast<std::int64_t>(static_cast<std::size_t>(length_) + t);
    if (needed > capacity_) grow(static_cast<std::size_t>(std::max({needed, 2 * capacity_, reserved_})));
    return length_;
  }
  // First use (length_ is 0): the buffers kept from an earlier use serve when the shapes match.
  if (batch != batch_ || heads != heads_ || head_dim != head_dim_) {
    k_ = Array<T>();
    v_ = Array<T>();
    capacity_ = 0;
    batch_ = batch;
    heads_ = heads;
    head_dim_ = head_dim;
  }
  const auto needed = std::max(static_cast<std::int64_t>(t), reserved_);
  if (needed > capacity_) {
    try {
      grow(static_cast<std::size_t>(needed));
    } catch (...) {
      reserved_ = 0;  // a reservation that cannot be met is dropped, so that the cache stays usable
      throw;
    }
  }
  batch_first_ = batch_first;
  owner_ = owner;
  in_use_ = true;
  return length_;
}

template class KVCache<float>;
template class KVCache<double>;

// ---- forward_cached -----------------------------------------------------------------------------

namespace {

// Throws unless the layer runs as at inference: grad mode off, and no dropout (eval mode, or p = 0).
template <class T>
void check_inference(const char* who, const TransformerEncoderLayer<T>& layer) {
  XGRAD_CHECK(!is_grad_enabled(), who, ": inference only: call it with grad mode off (xgrad::NoGradGuard no_grad;)");
  const bool training = layer.is_training() || layer.self_attn->is_training() || layer.dropout->is_training() ||
                        layer.dropout1->is_training() || layer.dropout2->is_training();
  XGRAD_CHECK(!training || layer.options().dropout() == 0, who, ": the layer is in training mode with dropout ",
              layer.options().dropout(), ": call eval() first (generation runs without dropout)");
}

// x_new in the layer's layout -> (N, t, E).
template <class T>
Tensor<T> to_batch_first(const char* who, const Tensor<T>& x, const TransformerEncoderLayerOptions& o) {
  const char* layout = o.batch_first() ? "(N, t, E)" : "(t, N, E)";
  XGRAD_CHECK(x.dim() == 3, who, ": x_new must be ", layout, " with E = d_model = ", o.d_model(), ", got shape ",
              x.shape());
  XGRAD_CHECK(x.size(2) == o.d_model(), who, ": x_new must be ", layout, " with E = d_model = ", o.d_model(),
              ", got width ", x.size(2), " (shape ", x.shape(), ")");
  XGRAD_CHECK(x.numel() > 0, who, ": x_new holds no position or no sequence (shape ", x.shape(), ")");
  return o.batch_first() ? x : transpose(x, 0, 1);
}

// The cached attention of t new queries of N sequences (H heads of d, each row q_row_stride apart
// from q) over `cache` (Hkv heads, start positions before the new ones).
template <class T>
detail::CachedAttention<T> over_cache(const char* who, KVCache<T>& cache, std::size_t N, std::size_t H, std::size_t Hkv,
                                      std::size_t d, std::size_t start, std::size_t t, const T* q,
                                      std::size_t q_row_stride) {
  detail::CachedAttention<T> a;
  a.who = who;
  a.batch = N;
  a.heads = H;
  a.kv_heads = Hkv;
  a.head_dim = d;
  a.start = start;
  a.new_positions = t;
  a.q = q;
  a.q_row_stride = q_row_stride;
  a.k = cache.key(0, 0, 0);
  a.v = cache.value(0, 0, 0);
  a.capacity = static_cast<std::size_t>(cache.capacity());
  a.values_may_be_nonfinite = cache.may_hold_nonfinite_values();
  return a;
}

// MultiheadAttention's self-attention of the new positions h (N, t, E) over the cached ones and
// themselves, causal (query i, at position start + i, sees keys 0..start + i):
//   q, k, v = h W_q^T + b_q, h W_k^T + b_k, h W_v^T + b_v    (k, v appended to the cache)
//   O_{n,h} = softmax(q_{n,h} K_{n,h}^T / sqrt(d), causal) V_{n,h}   (t, d) against (S, d)
//   out = concat_h(O_{n,h}) out_proj.weight^T + out_proj.bias
template <class T>
Tensor<T> cached_self_attention(const char* who, const typename KVCache<T>::Owner& owner, MultiheadAttention<T>& mha,
                                const Tensor<T>& h, KVCache<T>& cache) {
  const Shape s = h.shape();
  const std::size_t N = s[0], t = s[1], E = s[2];
  const auto H = static_cast<std::size_t>(mha.options().num_heads()), d = E / H;
  const auto start = static_cast<std::size_t>(cache.prepare(who, owner, N, H, d, mha.options().batch_first(), t));
  const Tensor<T> qkv = linear(h, mha.in_proj_weight, mha.in_proj_bias);  // (N, t, 3E): q | k | v
  const T* p = qkv.value().data();
  bool finite = true;
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t hh = 0; hh < H; ++hh) {
        const T* row = p + (n * t + i) * 3 * E + hh * d;
        std::copy_n(row + E, d, cache.key(n, hh, start + i));
        std::copy_n(row + 2 * E, d, cache.value(n, hh, start + i));
        for (std::size_t c = 0; c < d; ++c) finite = finite && std::isfinite(row[2 * E + c]);
      }
  if (!finite) cache.note_nonfinite_values();
  Array<T> attn = detail::attention_cached(over_cache(who, cache, N, H, H, d, start, t, p, 3 * E));
  cache.commit(t);
  return linear(Tensor<T>(std::move(attn)), mha.out_proj->weight, mha.out_proj->bias);
}

// One layer on x (N, t, E): TransformerEncoderLayer::forward's own structure (its block()), with
// the self-attention over the cache (dropout is off: check_inference).
template <class T>
Tensor<T> layer_step(const char* who, const typename KVCache<T>::Owner& owner, TransformerEncoderLayer<T>& layer,
                     const Tensor<T>& x, KVCache<T>& cache) {
  return layer.block(x,
                     [&](const Tensor<T>& h) { return cached_self_attention(who, owner, *layer.self_attn, h, cache); });
}

}  // namespace

template <class T>
Tensor<T> forward_cached(TransformerEncoderLayer<T>& layer, const Tensor<T>& x_new, KVCache<T>& cache) {
  const char* who = "forward_cached(TransformerEncoderLayer)";
  check_inference(who, layer);
  const Tensor<T> y = layer_step(who, {&layer, nullptr, -1}, layer, to_batch_first(who, x_new, layer.options()), cache);
  return layer.options().batch_first() ? y : transpose(y, 0, 1);
}

template <class T>
Tensor<T> forward_cached(TransformerEncoder<T>& encoder, const Tensor<T>& x_new, std::vector<KVCache<T>>& caches) {
  const char* who = "forward_cached(TransformerEncoder)";
  const auto layers = static_cast<std::size_t>(encoder.num_layers());
  if (caches.empty()) caches.resize(layers);
  XGRAD_CHECK(caches.size() == layers, who, ": expected one cache per layer (", layers, "), got ", caches.size());
  XGRAD_CHECK(!is_grad_enabled(), who, ": inference only: call it with grad mode off (xgrad::NoGradGuard no_grad;)");
  for (std::size_t i = 0; i < layers; ++i) {
    check_inference(who, *encoder.layer(static_cast<std::int64_t>(i)));
    XGRAD_CHECK(caches[i].length() == caches[0].length(), who, ": the caches must hold the same positions, but ",
                "cache ", i, " holds ", caches[i].length(), " and cache 0 ", caches[0].length());
  }
  Tensor<T> x = x_new;
  if (layers > 0) {
    // The layers are copies of one layer: they share its options, hence its layout.
    const TransformerEncoderLayerOptions& o = encoder.layer(0)->options();
    x = to_batch_first(who, x, o);
    for (std::size_t i = 0; i < layers; ++i) {
      const auto index = static_cast<std::int64_t>(i);
      TransformerEncoderLayer<T>& layer = *encoder.layer(index);
      x = layer_step(who, {&layer, &encoder, index}, layer, x, caches[i]);
    }
    if (!o.batch_first()) x = transpose(x, 0, 1);
  }
  if (encoder.norm) x = encoder.norm->forward(x);
  return x;
}

namespace {

// q_new (N, Hq, t, d), k_new and v_new (N, Hkv, t, d), checked against each other and the cache.
template <class T>
void check_gqa_shapes(const char* who, const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                      const KVCache<T>& cache) {
  XGRAD_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, who,
              ": expected q_new (N, Hq, t, d), k_new and v_new (N, Hkv, t, d), got q_new ", q.shape(), ", k_new ",
              k.shape(), ", v_new ", v.shape());
  XGRAD_CHECK(k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), who,
              ": q_new (N, Hq, t, d), k_new and v_new (N, Hkv, t, d) must agree in N, t and d, got q_new ", q.shape(),
              ", k_new ", k.shape(), ", v_new ", v.shape());
  XGRAD_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, who, ": q_new's heads (", q.size(1),
              ") must be a multiple of k_new's and v_new's (", k.size(1), ")");
  XGRAD_CHECK(q.numel() > 0, who, ": q_new holds no position, head or sequence (shape ", q.shape(), ")");
  XGRAD_CHECK(cache.batch_size() == 0 || cache.batch_size() == q.size(0), who, ": q_new holds ", q.size(0),
              " sequences but the cache holds ", cache.batch_size(), " (clear() the cache to start another batch)");
}

}  // namespace

template <class T>
Tensor<T> scaled_dot_product_attention_cached(const Tensor<T>& q_new, const Tensor<T>& k_new, const Tensor<T>& v_new,
                                              KVCache<T>& cache, const void* layer) {
  const char* who = "scaled_dot_product_attention_cached";
  XGRAD_CHECK(!is_grad_enabled(), who, ": inference only: call it with grad mode off (xgrad::NoGradGuard no_grad;)");
  check_gqa_shapes(who, q_new, k_new, v_new, cache);
  const Shape sq = q_new.shape(), skv = k_new.shape();
  const std::size_t N = sq[0], Hq = sq[1], t = sq[2], d = sq[3], Hkv = skv[1];
  typename KVCache<T>::Owner owner;
  owner.layer = layer;
  owner.kind = "attention layer";
  const auto start = static_cast<std::size_t>(cache.prepare(who, owner, N, Hkv, d, true, t));
  // k_new, v_new (N, Hkv, t, d) -> the cache's rows start .. start + t of each head
  const T* k = k_new.value().data();
  const T* v = v_new.value().data();
  bool finite = true;
  for (std::size_t nh = 0; nh < N * Hkv; ++nh) {
    std::copy_n(k + nh * t * d, t * d, cache.key(nh / Hkv, nh % Hkv, start));
    std::copy_n(v + nh * t * d, t * d, cache.value(nh / Hkv, nh % Hkv, start));
    for (std::size_t c = 0; c < t * d; ++c) finite = finite && std::isfinite(v[nh * t * d + c]);
  }
  if (!finite) cache.note_nonfinite_values();
  // q_new (N, Hq, t, d) -> (N, t, Hq d): the kernel reads each query row's heads side by side
  const Tensor<T> q = transpose(q_new, 1, 2);
  Array<T> out = detail::attention_cached(over_cache(who, cache, N, Hq, Hkv, d, start, t, q.value().data(), Hq * d));
  cache.commit(t);
  return Tensor<T>(std::move(out));
}

#define XGRAD_INSTANTIATE(T)                                                                                      \
  template Tensor<T> forward_cached<T>(TransformerEncoderLayer<T>&, const Tensor<T>&, KVCache<T>&);               \
  template Tensor<T> forward_cached<T>(TransformerEncoder<T>&, const Tensor<T>&, std::vector<KVCache<T>>&);       \
  template Tensor<T> scaled_dot_product_attention_cached<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                                            KVCache<T>&, const void*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::nn
