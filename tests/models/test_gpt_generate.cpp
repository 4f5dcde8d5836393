// GPT::forward_cached and GPT::generate: the logits of every cached step equal a full recompute's
// at that position, up to block_size (1e-12 in float64, 1e-5 in float32, relative to the logits'
// scale); generation with the cache gives the tokens of generation by recompute, within the
// context and beyond it with a sliding window (the same cropped contexts); the errors.
#include "test_util.hpp"

#include <cmath>

#include <xtensor/xview.hpp>

#include <xgrad/models/gpt.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

models::GPTConfig config() {
  models::GPTConfig c;
  c.vocab_size = 13;
  c.block_size = 10;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// A model with weights away from nanoGPT's small init, so that attention is far from uniform.
template <class T>
std::shared_ptr<models::GPT<T>> model(std::uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<models::GPT<T>>(config(), &gen);
  for (auto& p : m->parameters())
    for (auto& v : p.mutable_value()) v += T(0.5 * (gen.uniform() - 0.5));
  return m;
}

IndexArray tokens(std::size_t n, std::size_t t, std::uint64_t seed) {
  Generator g(seed);
  IndexArray x = IndexArray::from_shape({n, t});
  for (auto& v : x) v = std::int64_t(g.next_u64() % 13);
  return x;
}

// max |a - b| / max |b|.
template <class A, class B>
double rel(const A& a, const B& b) {
  double scale = 0;
  for (double v : b) scale = std::max(scale, std::abs(v));
  return max_abs_diff(a, b) / scale;
}

template <class T>
void cached_steps_equal_recompute(double tol) {
  auto m = model<T>(1);
  const IndexArray seq = tokens(2, 10, 2);
  NoGradGuard no_grad;
  std::vector<nn::KVCache<T>> caches;
  double worst = 0;
  // A prefill of 3 positions, then one at a time up to block_size.
  const Array<T> prefill = m->forward_cached(IndexArray(xt::view(seq, xt::all(), xt::range(0, 3))), caches).value();
  worst = std::max(worst, rel(prefill, m->forward(IndexArray(xt::view(seq, xt::all(), xt::range(0, 3)))).value()));
  for (std::size_t p = 3; p < 10; ++p) {
    const Array<T> step = m->forward_cached(IndexArray(xt::view(seq, xt::all(), xt::range(p, p + 1))), caches).value();
    const Array<T> full = m->forward(IndexArray(xt::view(seq, xt::all(), xt::range(0, p + 1)))).value();
    ASSERT_EQ(shape_of(step), (Shape{2, 1, 13}));
    worst = std::max(worst, rel(step, Array<T>(xt::view(full, xt::all(), xt::range(p, p + 1), xt::all()))));
  }
  EXPECT_LE(worst, tol);
  EXPECT_EQ(caches.size(), 2u);
  EXPECT_EQ(caches.front().length(), 10);
  // The cache is full: one more position is beyond the block size.
  XGRAD_EXPECT_THROW_MSG(m->forward_cached(IndexArray(xt::view(seq, xt::all(), xt::range(0, 1))), caches),
                         "GPT::forward_cached: cannot forward 1 positions after 10 cached ones: block size is only 10");
}

}  // namespace

TEST(GPTGenerate, CachedLogitsEqualRecomputeFloat64) { cached_steps_equal_recompute<double>(1e-12); }

TEST(GPTGenerate, CachedLogitsEqualRecomputeFloat32) { cached_steps_equal_recompute<float>(1e-5); }

// Within the context, then 30 tokens past it with windows of 4 and of block_size (nanoGPT's crop,
// re-filled at every token): the cache and the recompute draw the same tokens from the same seed.
TEST(GPTGenerate, CacheAndRecomputeGiveTheSameTokens) {
  auto m = model<double>(3);
  const IndexArray prompt = tokens(2, 3, 4);
  SamplingOptions sampling;
  sampling.temperature = 0.9;
  sampling.top_k = 8;
  sampling.top_p = 0.95;
  SamplingOptions greedy;
  greedy.greedy = true;
  for (const auto& [options, new_tokens, window] :
       std::vector<std::tuple<SamplingOptions, std::int64_t, std::int64_t>>{
           {sampling, 8, 0}, {greedy, 8, 0}, {sampling, 30, 4}, {greedy, 30, 4}, {sampling, 30, 10}, {greedy, 30, 1}}) {
    Generator a(7), b(7);
    const IndexArray cached = m->generate(prompt, new_tokens, options, &a, /*use_cache=*/true, window);
    const IndexArray recomputed = m->generate(prompt, new_tokens, options, &b, /*use_cache=*/false, window);
    ASSERT_EQ(shape_of(cached), (Shape{2, std::size_t(3 + new_tokens)}));
    EXPECT_EQ(cached, recomputed) << "window " << window << ", greedy " << options.greedy;
    EXPECT_EQ(IndexArray(xt::view(cached, xt::all(), xt::range(0, 3))), prompt);
    for (std::int64_t v : cached) EXPECT_TRUE(v >= 0 && v < 13);
  }
}

// The window's cropped context is what the recompute sees: greedy decoding by hand with forward()
// on the last `window` tokens whenever the context would pass block_size.
TEST(GPTGenerate, WindowCropsAsNanoGPT) {
  auto m = model<double>(5);
  SamplingOptions greedy;
  greedy.greedy = true;
  const IndexArray prompt = tokens(1, 6, 6);
  const IndexArray got = m->generate(prompt, 20, greedy, nullptr, /*use_cache=*/true, /*window=*/7);
  std::vector<std::int64_t> seq(prompt.begin(), prompt.end());
  std::size_t start = 0;
  while (seq.size() < 26) {
    if (seq.size() - start > 10) start = seq.size() - 7;
    IndexArray context = IndexArray::from_shape({1, seq.size() - start});
    std::copy(seq.begin() + std::ptrdiff_t(start), seq.end(), context.begin());
    const Array<double> logits = m->forward(context).value();
    const double* last = logits.data() + (context.size() - 1) * 13;
    seq.push_back(std::max_element(last, last + 13) - last);
  }
  EXPECT_EQ(std::vector<std::int64_t>(got.begin(), got.end()), seq);
}

TEST(GPTGenerate, ModeAndErrors) {
  auto m = model<float>(8);
  m->train();
  SamplingOptions options;
  const IndexArray out = m->generate(tokens(1, 2, 9), 9, options);  // 2 + 9 - 1 = block_size positions
  EXPECT_EQ(out.shape(1), 11u);
  EXPECT_TRUE(m->is_training());  // restored
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(1, 2, 9), 10, options),
                         "GPT::generate: 2 tokens and 10 new ones exceed the block size 10: generate at most 9, "
                         "or pass a window");
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(1, 2, 9), 5, options, nullptr, true, 11),
                         "window must be in [0, block_size = 10]");
  options.temperature = 0;
  EXPECT_THROW(m->generate(tokens(1, 2, 9), 5, options), std::invalid_argument);
  XGRAD_EXPECT_THROW_MSG(m->generate(IndexArray::from_shape({3}), 5, SamplingOptions()),
                         "GPT::generate: idx must be (N, t) token indices");
}

// max_new_tokens near INT64_MAX: the length t0 + max_new_tokens overflowed (then the block-size
// check passed and the result's allocation wrapped to a few bytes: heap corruption). Now the sum
// is checked, and the result's shape goes through checked_numel before anything is allocated.
TEST(GPTGenerate, HugeMaxNewTokensAreRefusedBeforeAnythingIsAllocated) {
  auto m = model<float>(8);
  const SamplingOptions options;
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(1, 2, 9), max, options),
                         "GPT::generate: the length of the result (prompt length + max_new_tokens) overflows (2 + ",
                         "9223372036854775807)");
  // With a window any length is accepted, up to what can be allocated.
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(1, 2, 9), max, options, nullptr, true, 5), "overflows");
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(1, 3, 9), (std::int64_t{1} << 61) - 3, options, nullptr, true, 5),
                         "GPT::generate: the shape (1, 2305843009213693952) has", "more than can be allocated");
  XGRAD_EXPECT_THROW_MSG(m->generate(tokens(4, 3, 9), (std::int64_t{1} << 62), options, nullptr, true, 5),
                         "GPT::generate: the shape (4, 4611686018427387907) has too many elements");
  EXPECT_EQ(m->generate(tokens(1, 2, 9), 3, options).shape(1), 5u);  // still works
}
