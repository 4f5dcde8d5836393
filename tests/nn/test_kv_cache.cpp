// KVCache and forward_cached (xgrad/nn/kv_cache.hpp): for small causal pre- and post-norm stacks
// with a final norm, in float64 and float32 and both layouts, a prompt is prefilled and then one
// token at a time is fed up to the context length; at every position the cached output equals the
// last position of a full causal forward over everything so far (1e-12 in float64, 1e-5 relative
// in float32). Also mixed chunk sizes, one layer alone (with and without biases), the cache's
// contents, crop/clear/reserve, and the errors.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

using Options = nn::TransformerEncoderLayerOptions;

// Every parameter moved off its initial value, so that biases and norm affines matter.
template <class T>
void randomize(nn::Module<T>& m, std::uint64_t seed) {
  Generator g(seed);
  for (auto p : m.parameters())
    for (auto& x : p.mutable_value()) x += static_cast<T>(0.3 * g.normal());
}

struct Config {
  bool norm_first;
  bool batch_first;
};

std::string name(const Config& c) {
  return std::string(c.norm_first ? "pre-norm" : "post-norm") + (c.batch_first ? ", batch_first" : ", (L, N, E)");
}

Options layer_options(const Config& c, bool bias = true) {
  // d_model 8, 2 heads of 4; dropout 0.1 so that eval() matters.
  return Options(8, 2).dim_feedforward(12).dropout(0.1).activation(c.norm_first ? "gelu" : "relu")
      .norm_first(c.norm_first).batch_first(c.batch_first).bias(bias);
}

// Two layers and a final LayerNorm, in eval mode.
template <class T>
std::shared_ptr<nn::TransformerEncoder<T>> make_encoder(const Config& c, std::uint64_t seed = 3) {
  manual_seed(seed);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<T>>(layer_options(c));
  auto encoder = std::make_shared<nn::TransformerEncoder<T>>(layer, 2, std::make_shared<nn::LayerNorm<T>>(8));
  randomize(*encoder, seed + 1);
  encoder->eval();
  return encoder;
}

// x (N = 2 sequences, L positions, E = 8) in the layout of c.
template <class T>
Tensor<T> make_input(const Config& c, std::size_t L, std::uint64_t seed = 9) {
  Generator g(seed);
  return randn<T>(c.batch_first ? Shape{2, L, 8} : Shape{L, 2, 8}, g);
}

std::int64_t seq_dim(const Config& c) { return c.batch_first ? 1 : 0; }

// |got - want| relative to want's scale (at least 1).
template <class T>
double error(const Tensor<T>& got, const Tensor<T>& want) {
  double scale = 1;
  for (T v : want.value()) scale = std::max(scale, std::abs(static_cast<double>(v)));
  return max_abs_diff(got.value(), want.value()) / scale;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 1e-5;
}

template <class T>
class KVCacheTest : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(KVCacheTest, Types);

const Config kConfigs[] = {{false, true}, {true, true}, {false, false}, {true, false}};

// Prefill 3 positions, then one at a time up to the context length 8: each step's output is the
// last position of the full causal forward over positions 0..p.
TYPED_TEST(KVCacheTest, StepByStepEqualsFullRecompute) {
  using T = TypeParam;
  const std::size_t L = 8, prompt = 3;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(name(c));
    auto encoder = make_encoder<T>(c);
    const Tensor<T> x = make_input<T>(c, L);
    const std::int64_t sd = seq_dim(c);
    NoGradGuard no_grad;
    std::vector<nn::KVCache<T>> caches;
    const Tensor<T> first = nn::forward_cached(*encoder, slice(x, sd, 0, prompt), caches);
    ASSERT_EQ(caches.size(), 2u);
    const Tensor<T> full_prompt = encoder->forward(slice(x, sd, 0, prompt), {}, {}, /*is_causal=*/true);
    EXPECT_LE(error(first, full_prompt), tolerance<T>());
    for (std::size_t p = prompt; p < L; ++p) {
      const auto pos = static_cast<std::int64_t>(p);
      const Tensor<T> step = nn::forward_cached(*encoder, slice(x, sd, pos, pos + 1), caches);
      const Tensor<T> full = encoder->forward(slice(x, sd, 0, pos + 1), {}, {}, /*is_causal=*/true);
      EXPECT_LE(error(step, slice(full, sd, pos, pos + 1)), tolerance<T>()) << "position " << p;
      EXPECT_EQ(caches[0].length(), pos + 1);
      EXPECT_EQ(caches[1].length(), pos + 1);
    }
  }
}

TYPED_TEST(KVCacheTest, MixedChunkSizes) {
  using T = TypeParam;
  const std::size_t L = 9;
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(name(c));
    auto encoder = make_encoder<T>(c, 4);
    const Tensor<T> x = make_input<T>(c, L, 10);
    const std::int64_t sd = seq_dim(c);
    NoGradGuard no_grad;
    const Tensor<T> full = encoder->forward(x, {}, {}, /*is_causal=*/true);
    std::vector<nn::KVCache<T>> caches;
    std::int64_t at = 0;
    for (std::int64_t chunk : {2, 1, 4, 1, 1}) {
      const Tensor<T> y = nn::forward_cached(*encoder, slice(x, sd, at, at + chunk), caches);
      EXPECT_LE(error(y, slice(full, sd, at, at + chunk)), tolerance<T>()) << "chunk at " << at;
      at += chunk;
    }
    EXPECT_EQ(at, static_cast<std::int64_t>(L));
  }
}

// One layer alone, with and without biases, against layer.forward(..., is_causal = true); the
// cache holds the in-projection's keys and values per head.
TYPED_TEST(KVCacheTest, OneLayerAndTheCachedKeysAndValues) {
  using T = TypeParam;
  for (bool bias : {true, false}) {
    for (const Config& c : kConfigs) {
      SCOPED_TRACE(name(c) + (bias ? "" : ", no bias"));
      manual_seed(5);
      nn::TransformerEncoderLayer<T> layer(layer_options(c, bias));
      randomize(layer, 6);
      layer.eval();
      const Tensor<T> x = make_input<T>(c, 5, 11);
      const std::int64_t sd = seq_dim(c);
      NoGradGuard no_grad;
      const Tensor<T> full = layer.forward(x, {}, {}, /*is_causal=*/true);
      nn::KVCache<T> cache;
      EXPECT_LE(error(nn::forward_cached(layer, slice(x, sd, 0, 2), cache), slice(full, sd, 0, 2)), tolerance<T>());
      EXPECT_LE(error(nn::forward_cached(layer, slice(x, sd, 2, 5), cache), slice(full, sd, 2, 5)), tolerance<T>());
      EXPECT_EQ(cache.length(), 5);
      EXPECT_EQ(cache.batch_size(), 2);
      // keys()[n, h, p, :] = (x W_k^T + b_k)[n, p, h*4 : (h+1)*4], post-norm (pre-norm: of norm1(x)).
      const Tensor<T> xb = c.batch_first ? x : transpose(x, 0, 1);
      const Tensor<T> h = c.norm_first ? layer.norm1->forward(xb) : xb;
      const Tensor<T> kv = linear(h, layer.self_attn->in_proj_weight, layer.self_attn->in_proj_bias);  // (2, 5, 24)
      for (const auto& [cached, offset] : {std::pair{cache.keys(), 8}, std::pair{cache.values(), 16}}) {
        ASSERT_EQ(shape_of(cached), (Shape{2, 2, 5, 4}));
        double worst = 0;
        for (std::size_t n = 0; n < 2; ++n)
          for (std::size_t hh = 0; hh < 2; ++hh)
            for (std::size_t p = 0; p < 5; ++p)
              for (std::size_t j = 0; j < 4; ++j)
                worst = std::max(worst, std::abs(static_cast<double>(cached(n, hh, p, j) -
                                                                     kv.value()(n, p, offset + hh * 4 + j))));
        EXPECT_EQ(worst, 0.0);
      }
    }
  }
}

// crop() goes back to a shorter context and continues with other tokens; clear() starts over,
// with another batch size too; reserve() preallocates, and without it the buffers double.
TYPED_TEST(KVCacheTest, CropClearReserve) {
  using T = TypeParam;
  const Config c{true, true};
  auto encoder = make_encoder<T>(c, 7);
  const Tensor<T> x = make_input<T>(c, 6, 12), other = make_input<T>(c, 6, 13);
  NoGradGuard no_grad;
  std::vector<nn::KVCache<T>> caches;
  nn::forward_cached(*encoder, x, caches);
  for (auto& cache : caches) cache.crop(2);
  // The sequence is now x[:2] followed by other[2:].
  const Tensor<T> mixed = cat<T>({slice(x, 1, 0, 2), slice(other, 1, 2, 6)}, 1);
  const Tensor<T> y = nn::forward_cached(*encoder, slice(other, 1, 2, 6), caches);
  EXPECT_LE(error(y, slice(encoder->forward(mixed, {}, {}, true), 1, 2, 6)), tolerance<T>());

  for (auto& cache : caches) cache.clear();
  EXPECT_EQ(caches[0].length(), 0);
  EXPECT_EQ(caches[0].batch_size(), 0);
  const Tensor<T> one = slice(x, 0, 1, 2);  // a batch of 1 now
  EXPECT_LE(error(nn::forward_cached(*encoder, one, caches), encoder->forward(one, {}, {}, true)), tolerance<T>());
  EXPECT_EQ(caches[0].batch_size(), 1);

  nn::KVCache<T> grown, reserved;
  reserved.reserve(16);
  auto& layer = *encoder->layer(0);
  std::vector<std::int64_t> capacities;
  for (std::int64_t p = 0; p < 6; ++p) {
    nn::forward_cached(layer, slice(x, 1, p, p + 1), grown);
    nn::forward_cached(layer, slice(x, 1, p, p + 1), reserved);
    capacities.push_back(grown.capacity());
    EXPECT_EQ(reserved.capacity(), 16);
  }
  EXPECT_EQ(capacities, (std::vector<std::int64_t>{1, 2, 4, 4, 8, 8}));
  EXPECT_EQ(max_abs_diff(grown.keys(), reserved.keys()), 0.0);
  XGRAD_EXPECT_THROW_MSG(grown.crop(7), "crop", "[0, 6]", "got 7");
  XGRAD_EXPECT_THROW_MSG(grown.reserve(-1), "reserve", "got -1");
}

// Under bf16 autocast (float32), the cached attention's products run in bf16 as the full
// forward's do: the two agree within bf16's rounding (2e-2 relative, as docs/autocast.md).
TEST(KVCacheAutocast, StepByStepFollowsTheFullForward) {
  const Config c{true, true};
  auto encoder = make_encoder<float>(c, 8);
  const Tensor<float> x = make_input<float>(c, 5, 14);
  NoGradGuard no_grad;
  AutocastGuard autocast;
  const Tensor<float> full = encoder->forward(x, {}, {}, /*is_causal=*/true);
  std::vector<nn::KVCache<float>> caches;
  EXPECT_LE(error(nn::forward_cached(*encoder, slice(x, 1, 0, 2), caches), slice(full, 1, 0, 2)), 2e-2);
  for (std::int64_t p = 2; p < 5; ++p)
    EXPECT_LE(error(nn::forward_cached(*encoder, slice(x, 1, p, p + 1), caches), slice(full, 1, p, p + 1)), 2e-2);
}

TYPED_TEST(KVCacheTest, Errors) {
  using T = TypeParam;
  const Config c{false, true};
  auto encoder = make_encoder<T>(c);
  const Tensor<T> x = make_input<T>(c, 3);
  auto& layer = *encoder->layer(0);
  nn::KVCache<T> cache;
  std::vector<nn::KVCache<T>> caches;
  // Grad mode on.
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, x, cache), "inference only", "NoGradGuard");
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*encoder, x, caches), "inference only", "NoGradGuard");
  NoGradGuard no_grad;
  // Training mode with dropout; training with dropout 0 runs.
  layer.train();
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, x, cache), "training mode with dropout 0.1", "eval()");
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*encoder, x, caches), "training mode with dropout 0.1");
  layer.eval();
  {
    manual_seed(1);
    nn::TransformerEncoderLayer<T> no_dropout(layer_options(c).dropout(0.0));
    nn::KVCache<T> fresh;
    const Tensor<T> y = nn::forward_cached(no_dropout, x, fresh);
    EXPECT_LE(error(y, no_dropout.forward(x, {}, {}, true)), tolerance<T>());
  }
  // Wrong width, wrong rank, nothing to add.
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, zeros<T>({2, 3, 6}), cache), "(N, t, E) with E = d_model = 8",
                         "width 6");
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, zeros<T>({3, 8}), cache), "(N, t, E)", "(3, 8)");
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, zeros<T>({2, 0, 8}), cache), "no position");
  EXPECT_EQ(cache.length(), 0);  // nothing was appended
  // Another batch size, or a layer of the other layout, on a cache in use.
  nn::forward_cached(layer, x, cache);
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(layer, zeros<T>({3, 1, 8}), cache), "holds 3 sequences",
                         "the cache holds 2");
  manual_seed(1);
  nn::TransformerEncoderLayer<T> seq_first(layer_options({false, false}));
  seq_first.eval();
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(seq_first, zeros<T>({1, 2, 8}), cache), "holds the keys and values of",
                         "one cache per layer");
  EXPECT_EQ(cache.length(), 3);
  // One cache per layer.
  caches.resize(1);
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*encoder, x, caches), "one cache per layer (2), got 1");
  caches.resize(2);
  caches[1] = cache;
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*encoder, x, caches), "same positions", "cache 1 holds 3");
}

// A reserve() that cannot be served (2^41 positions of 2 x 2 heads of 4: 2^45 elements, beyond
// any address space) throws OutOfMemoryError and leaves the cache as it was: it keeps growing as
// before and its results are right. A reservation made before the first use that cannot be met
// throws at that use and is dropped, so the next call works; clear() forgets a pending one.
// The sanitizers' allocator reports a failed allocation and aborts instead of throwing
// std::bad_alloc, whatever their options: this runs in the plain build only (as
// base/test_hardening.cpp's allocation tests).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TYPED_TEST(KVCacheTest, FailedReserveLeavesTheCacheUsable) {
  using T = TypeParam;
  const Config c{true, true};
  auto encoder = make_encoder<T>(c, 5);
  auto& layer = *encoder->layer(0);
  const Tensor<T> x = make_input<T>(c, 6, 15);
  NoGradGuard no_grad;
  const Tensor<T> full = layer.forward(x, {}, {}, /*is_causal=*/true);
  const std::int64_t huge = std::int64_t{1} << 41;

  nn::KVCache<T> cache;
  nn::forward_cached(layer, slice(x, 1, 0, 2), cache);
  EXPECT_EQ(cache.capacity(), 2);
  EXPECT_THROW(cache.reserve(huge), OutOfMemoryError);
  EXPECT_EQ(cache.capacity(), 2);
  EXPECT_EQ(cache.length(), 2);
  EXPECT_LE(error(nn::forward_cached(layer, slice(x, 1, 2, 6), cache), slice(full, 1, 2, 6)), tolerance<T>());
  EXPECT_EQ(cache.capacity(), 6);  // max(needed 6, twice 2): the failed reservation left no trace

  nn::KVCache<T> pending;
  pending.reserve(huge);
  EXPECT_THROW(nn::forward_cached(layer, slice(x, 1, 0, 2), pending), OutOfMemoryError);
  EXPECT_EQ(pending.length(), 0);
  EXPECT_EQ(pending.batch_size(), 0);
  EXPECT_LE(error(nn::forward_cached(layer, x, pending), full), tolerance<T>());
  EXPECT_EQ(pending.capacity(), 6);

  nn::KVCache<T> cleared;
  cleared.reserve(huge);
  cleared.clear();
  EXPECT_LE(error(nn::forward_cached(layer, x, cleared), full), tolerance<T>());
  EXPECT_EQ(cleared.capacity(), 6);
}
#endif

// A cache belongs to the layer that first used it: passing it with another layer (alone, or as
// another layer's cache of an encoder, or swapped) throws naming both, and appends nothing;
// clear() frees it for another layer.
TYPED_TEST(KVCacheTest, OneCacheServesOneLayer) {
  using T = TypeParam;
  const Config c{false, true};
  auto encoder = make_encoder<T>(c, 6);
  auto other = make_encoder<T>(c, 7);
  auto &first = *encoder->layer(0), &second = *encoder->layer(1);
  const Tensor<T> x = make_input<T>(c, 3, 16);
  NoGradGuard no_grad;

  nn::KVCache<T> cache;
  nn::forward_cached(first, x, cache);
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(second, x, cache),
                         "this cache holds the keys and values of the TransformerEncoderLayer at",
                         ", not of the TransformerEncoderLayer at", "use one cache per layer");
  EXPECT_EQ(cache.length(), 3);
  nn::forward_cached(first, slice(x, 1, 0, 1), cache);  // its own layer still works
  EXPECT_EQ(cache.length(), 4);
  cache.clear();
  EXPECT_LE(error(nn::forward_cached(second, x, cache), second.forward(x, {}, {}, true)), tolerance<T>());

  std::vector<nn::KVCache<T>> caches;
  nn::forward_cached(*encoder, x, caches);
  std::vector<nn::KVCache<T>> swapped{caches[1], caches[0]};
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*encoder, x, swapped),
                         "holds the keys and values of layer 1 of the "
                         "TransformerEncoder at",
                         "not of layer 0 of the TransformerEncoder at");
  XGRAD_EXPECT_THROW_MSG(nn::forward_cached(*other, x, caches), "layer 0 of the TransformerEncoder at",
                         "not of layer 0 of the TransformerEncoder at");
  EXPECT_EQ(caches[0].length(), 3);
  for (auto& cache_i : caches) cache_i.clear();
  EXPECT_LE(error(nn::forward_cached(*other, x, caches), other->forward(x, {}, {}, true)), tolerance<T>());
}

// A NaN or Inf input position p reaches the positions that see its key (>= p) and no other, the
// same whether the prompt is prefilled at once or fed one position at a time: the positions
// causality hides contribute nothing, not even 0 x NaN (the full forward's rule too).
TYPED_TEST(KVCacheTest, NonFinitePositionFollowsCausality) {
  using T = TypeParam;
  for (const Config& c : kConfigs) {
    for (const T bad : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity()}) {
      SCOPED_TRACE(name(c) + (std::isnan(bad) ? ", NaN" : ", Inf"));
      auto encoder = make_encoder<T>(c, 8);
      Tensor<T> x = make_input<T>(c, 5, 17);
      x.mutable_value()(c.batch_first ? 0 : 2, c.batch_first ? 2 : 0, 3) = bad;  // sequence 0, position 2
      const std::int64_t sd = seq_dim(c);
      NoGradGuard no_grad;
      const Tensor<T> full = encoder->forward(x, {}, {}, /*is_causal=*/true);
      std::vector<nn::KVCache<T>> prefilled, stepped;
      const Tensor<T> whole = nn::forward_cached(*encoder, x, prefilled);
      std::vector<Tensor<T>> steps;
      for (std::int64_t p = 0; p < 5; ++p)
        steps.push_back(nn::forward_cached(*encoder, slice(x, sd, p, p + 1), stepped));
      const Tensor<T> one_by_one = cat<T>(steps, sd);
      // Before p and in the other sequence: finite. At p: NaN (its LayerNorm sees the Inf or NaN).
      // After p: NaN as the full forward says (a NaN key poisons, an Inf one may score -inf).
      for (const Tensor<T>* got : {&full, &whole, &one_by_one}) {
        const Array<T>& y = got->value();
        const Array<T>& want = full.value();
        for (std::size_t p = 0; p < 5; ++p)
          for (std::size_t n = 0; n < 2; ++n)
            for (std::size_t e = 0; e < 8; ++e) {
              const T value = c.batch_first ? y(n, p, e) : y(p, n, e);
              const bool nan_wanted = n == 1 || p < 2 ? false
                                      : p == 2 || std::isnan(bad)
                                          ? true
                                          : std::isnan(c.batch_first ? want(n, p, e) : want(p, n, e));
              EXPECT_EQ(std::isnan(value), nan_wanted) << "position " << p << ", sequence " << n;
              if (n == 1 || p < 2) {
                EXPECT_TRUE(std::isfinite(value)) << "position " << p;
              }
            }
      }
      // The finite positions agree as without the bad input.
      EXPECT_LE(error(slice(whole, sd, 0, 2), slice(full, sd, 0, 2)), tolerance<T>());
      EXPECT_LE(error(slice(one_by_one, sd, 0, 2), slice(full, sd, 0, 2)), tolerance<T>());
    }
  }
}

}  // namespace

// Grouped-query attention over a cache (scaled_dot_product_attention_cached): the cache holds the
// Hkv key/value heads only; a prompt prefilled and then one position at a time gives, at every
// step, the rows of the full causal scaled_dot_product_attention(..., enable_gqa=true) over all
// positions (G = 2 and multi-query G = 4).
TYPED_TEST(KVCacheTest, GroupedQueryAttentionEqualsTheFullCausalForward) {
  using T = TypeParam;
  const std::int64_t N = 2, Hq = 4, L = 7, d = 3, prompt = 3;
  for (std::int64_t Hkv : {2, 1}) {
    SCOPED_TRACE("Hkv = " + std::to_string(Hkv));
    Generator g(31);
    const auto sz = [](std::int64_t x) { return static_cast<std::size_t>(x); };
    const Tensor<T> q = randn<T>({sz(N), sz(Hq), sz(L), sz(d)}, g), k = randn<T>({sz(N), sz(Hkv), sz(L), sz(d)}, g),
                    v = randn<T>({sz(N), sz(Hkv), sz(L), sz(d)}, g);
    NoGradGuard no_grad;
    // (N, Hq, L, d) -> (N, L, Hq d): the heads side by side
    const Tensor<T> full = reshape(
        transpose(scaled_dot_product_attention<T>(q, k, v, {}, 0.0, true, std::nullopt, true), 1, 2), {N, L, Hq * d});
    nn::KVCache<T> cache;
    const int layer = 0;  // any address names the layer
    for (std::int64_t start = 0; start < L;) {
      const std::int64_t t = start == 0 ? prompt : 1;
      SCOPED_TRACE("positions " + std::to_string(start) + " .. " + std::to_string(start + t));
      const Tensor<T> y = nn::scaled_dot_product_attention_cached(
          slice(q, 2, start, start + t), slice(k, 2, start, start + t), slice(v, 2, start, start + t), cache, &layer);
      EXPECT_LE(error(y, slice(full, 1, start, start + t)), tolerance<T>());
      start += t;
      EXPECT_EQ(cache.length(), start);
    }
    // only the key/value heads are kept, as given
    EXPECT_EQ(cache.keys(), k.value());
    EXPECT_EQ(cache.values(), v.value());
  }
}

TYPED_TEST(KVCacheTest, GroupedQueryAttentionErrors) {
  using T = TypeParam;
  const char* who = "scaled_dot_product_attention_cached";
  nn::KVCache<T> cache;
  const int layer = 0, other = 0;
  const Tensor<T> q = zeros<T>({2, 4, 1, 3}), kv = zeros<T>({2, 2, 1, 3});
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(q, kv, kv, cache, &layer), who, "inference only");
  NoGradGuard no_grad;
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(zeros<T>({2, 3, 1, 3}), kv, kv, cache, &layer), who,
                         "q_new's heads (3)", "multiple of k_new's and v_new's (2)");
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(q, kv, zeros<T>({2, 2, 2, 3}), cache, &layer), who,
                         "agree in N, t and d", "v_new (2, 2, 2, 3)");
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(zeros<T>({4, 1, 3}), kv, kv, cache, &layer), who,
                         "q_new (N, Hq, t, d)", "(4, 1, 3)");
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(zeros<T>({2, 4, 0, 3}), zeros<T>({2, 2, 0, 3}),
                                                                 zeros<T>({2, 2, 0, 3}), cache, &layer),
                         who, "no position");
  EXPECT_EQ(cache.length(), 0);  // nothing was appended
  nn::scaled_dot_product_attention_cached(q, kv, kv, cache, &layer);
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(zeros<T>({3, 4, 1, 3}), zeros<T>({3, 2, 1, 3}),
                                                                 zeros<T>({3, 2, 1, 3}), cache, &layer),
                         who, "holds 3 sequences", "the cache holds 2");
  XGRAD_EXPECT_THROW_MSG(
      nn::scaled_dot_product_attention_cached(q, zeros<T>({2, 1, 1, 3}), zeros<T>({2, 1, 1, 3}), cache, &layer), who,
      "the cache holds 2 heads of size 3", "1 of size 3");
  XGRAD_EXPECT_THROW_MSG(nn::scaled_dot_product_attention_cached(q, kv, kv, cache, &other), who,
                         "this cache holds the keys and values of the attention layer at",
                         "not of the attention layer at");
  EXPECT_EQ(cache.length(), 1);
}
