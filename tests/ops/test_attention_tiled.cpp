// The tiled attention path (xgrad/ops/attention/attention_tiled.cpp) against the materialized one
// (attention.cpp): values and gradients for every mask form, causal with L < S and L > S, fully
// masked rows, dropout (both paths draw the same Philox mask), the scale option, through
// scaled_dot_product_attention and nn.MultiheadAttention in both layouts; tiny blocks forced so
// that the shapes cross block edges; results independent of the thread count; the dispatch
// setting; the materialized path's memory guard.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/memory_limit.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/ops/attention/attention_kernels.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Runs the attention op on `path` with blocks of (query_rows, key_rows) while it lives.
struct PathGuard {
  AttentionPath before = get_attention_path();
  PathGuard(AttentionPath path, std::size_t query_rows = 0, std::size_t key_rows = 0) {
    set_attention_path(path);
    detail::set_attention_tiles(query_rows, key_rows);
  }
  ~PathGuard() {
    set_attention_path(before);
    detail::set_attention_tiles(0, 0);
  }
};

// What one run gave: the output, then the gradient of each input.
template <class T>
std::vector<Array<T>> outputs_and_grads(const Tensor<T>& y, const std::vector<Tensor<T>>& in) {
  Generator g(99);
  sum(y * randn<T>(y.shape(), g)).backward();  // a random upstream gradient
  std::vector<Array<T>> r{y.value()};
  for (const Tensor<T>& x : in) r.push_back(x.grad());
  return r;
}

// max |got - want| / max |want| over each pair.
template <class T>
void expect_close(const std::vector<Array<T>>& got, const std::vector<Array<T>>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    double scale = 0;
    for (T x : want[i]) scale = std::max(scale, std::abs(static_cast<double>(x)));
    EXPECT_LE(max_abs_diff(got[i], want[i]), rel * scale) << (i == 0 ? "output" : "gradient " + std::to_string(i));
  }
}

template <class T>
struct Case {
  Case(std::string name_, Shape q_, Shape k_, Shape v_, AttnMask<T> mask_ = {}, bool causal_ = false, double p_ = 0.0,
       std::optional<double> scale_ = std::nullopt)
      : name(std::move(name_)), q(q_), k(k_), v(v_), mask(std::move(mask_)), causal(causal_), p(p_), scale(scale_) {}
  std::string name;
  Shape q, k, v;
  AttnMask<T> mask;
  bool causal;
  double p;  // dropout
  std::optional<double> scale;
};

template <class T>
Array<T> with_neg_inf(Array<T> m, std::size_t full_row) {
  const T inf = std::numeric_limits<T>::infinity();
  for (std::size_t i = 0; i < m.size(); i += 5) m.data()[i] = -inf;
  const std::size_t S = m.shape().back();
  std::fill(m.data() + full_row * S, m.data() + (full_row + 1) * S, -inf);  // a fully masked row
  return m;
}

template <class T>
std::vector<Case<T>> cases() {
  Generator g(3);
  BoolArray bool_ls = BoolArray::from_shape({7, 9}), bool_bh = BoolArray::from_shape({2, 3, 7, 9});
  for (auto& x : bool_ls) x = g.uniform() < 0.3;
  for (auto& x : bool_bh) x = g.uniform() < 0.4;
  std::fill(bool_ls.begin() + 2 * 9, bool_ls.begin() + 3 * 9, true);  // query 2 sees no key
  const Shape q{2, 3, 7, 4}, k{2, 3, 9, 4}, v{2, 3, 9, 5};
  return {
      {"no mask", q, k, v},
      {"bool (L, S), a fully masked row", q, k, v, bool_ls},
      {"bool (B, H, L, S)", q, k, v, bool_bh},
      {"float (L, S) with -inf, a fully masked row", q, k, v, with_neg_inf(randn<T>({7, 9}, g).value(), 4)},
      {"float (B, 1, L, S)", q, k, v, randn<T>({2, 1, 7, 9}, g).value()},
      {"causal, L < S", q, k, v, {}, true},
      {"causal, L > S", {2, 3, 11, 4}, {2, 3, 6, 4}, {2, 3, 6, 5}, {}, true},
      {"dropout 0.3, bool mask", q, k, v, bool_ls, false, 0.3},
      {"dropout 0.5, causal, scale 0.3", {2, 3, 11, 4}, {2, 3, 11, 4}, {2, 3, 11, 5}, {}, true, 0.5, 0.3},
  };
}

// sdpa on `path` (blocks q_rows x k_rows), inputs from fixed seeds, dropout from Generator(5).
template <class T>
std::vector<Array<T>> sdpa_run(const Case<T>& c, AttentionPath path, std::size_t q_rows = 0, std::size_t k_rows = 0) {
  PathGuard guard(path, q_rows, k_rows);
  Generator g(11);
  std::vector<Tensor<T>> in{randn<T>(c.q, g, true), randn<T>(c.k, g, true), randn<T>(c.v, g, true)};
  Generator drop(5);
  return outputs_and_grads(
      scaled_dot_product_attention(in[0], in[1], in[2], c.mask, c.p, c.causal, c.scale, false, &drop), in);
}

template <class T>
void expect_paths_agree(double rel) {
  for (const Case<T>& c : cases<T>()) {
    SCOPED_TRACE(c.name);
    const auto want = sdpa_run(c, AttentionPath::Materialized);
    for (auto [qr, kr] : {std::pair<std::size_t, std::size_t>{2, 3}, {4, 4}, {16, 8}, {0, 0}}) {
      SCOPED_TRACE("blocks " + std::to_string(qr) + " x " + std::to_string(kr));
      expect_close(sdpa_run(c, AttentionPath::Tiled, qr, kr), want, rel);
    }
  }
}

}  // namespace

TEST(AttentionTiled, MatchesMaterializedInDouble) { expect_paths_agree<double>(1e-12); }

TEST(AttentionTiled, MatchesMaterializedInFloat) { expect_paths_agree<float>(1e-5); }

// A fully masked row gives zeros and zero gradients on the tiled path too.
TEST(AttentionTiled, FullyMaskedRowGivesZeros) {
  const Case<double> c = cases<double>()[1];
  const auto r = sdpa_run(c, AttentionPath::Tiled, 2, 3);
  for (std::size_t b = 0; b < 6; ++b)
    for (std::size_t e = 0; e < 5; ++e) EXPECT_EQ(r[0].data()[(b * 7 + 2) * 5 + e], 0.0);
  for (std::size_t b = 0; b < 6; ++b)
    for (std::size_t e = 0; e < 4; ++e) EXPECT_EQ(r[1].data()[(b * 7 + 2) * 4 + e], 0.0);  // dq of query 2
}

// A query row whose keys all carry one large finite mask value (-1e9, or the type's lowest, as
// padding masks do) attends uniformly; the tiled backward used to rebuild P as exp(A - lse) with
// lse = m + log(l), which loses log(l) at |m| ~ 1e9 (dq ~ S times too large). Tiled and
// materialized agree on values and every gradient, through a float attn_mask and through
// nn.MultiheadAttention's bool attn_mask plus a float key_padding_mask that pads a whole sequence.
template <class T>
void expect_large_finite_masks_agree(double rel) {
  for (const T big : {T(-1e9), std::numeric_limits<T>::lowest()}) {
    SCOPED_TRACE("mask value " + std::to_string(static_cast<double>(big)));
    Generator g(21);
    Array<T> mask = randn<T>({7, 9}, g).value();
    for (std::size_t j = 0; j < 9; ++j) mask(1, j) = mask(5, j) = big;  // rows 1 and 5: every key
    mask(3, 2) = mask(3, 7) = big;                                      // row 3: two keys
    {
      SCOPED_TRACE("float attn_mask");
      const Case<T> c("", {2, 3, 7, 4}, {2, 3, 9, 4}, {2, 3, 9, 5}, mask);
      const auto want = sdpa_run(c, AttentionPath::Materialized);
      for (auto [qr, kr] : {std::pair<std::size_t, std::size_t>{2, 3}, {4, 4}, {0, 0}}) {
        SCOPED_TRACE("blocks " + std::to_string(qr) + " x " + std::to_string(kr));
        expect_close(sdpa_run(c, AttentionPath::Tiled, qr, kr), want, rel);
      }
    }
    // nn.MultiheadAttention: bool attn_mask (a few keys), float key_padding_mask: sequence 1 padded
    // with `big` everywhere, sequence 0 on its last two keys.
    constexpr std::int64_t E = 8, H = 2, N = 2, L = 6;
    manual_seed(1);
    nn::MultiheadAttention<T> mha(nn::MultiheadAttentionOptions(E, H).batch_first(true));
    Array<T> padding = zeros<T>({N, L}).value();
    for (std::size_t j = 0; j < L; ++j) padding(1, j) = big;
    padding(0, L - 1) = padding(0, L - 2) = big;
    BoolArray attn = BoolArray::from_shape({L, L});
    std::fill(attn.begin(), attn.end(), false);
    attn(0, 3) = attn(2, 1) = attn(4, 0) = true;
    auto run = [&](AttentionPath path, std::size_t qr, std::size_t kr) {
      PathGuard guard(path, qr, kr);
      mha.zero_grad();
      Generator gx(8);
      Tensor<T> x = randn<T>({N, L, E}, gx, true);
      auto [y, w] = mha.forward(x, x, x, padding, /*need_weights=*/false, attn, true, /*is_causal=*/false);
      auto r = outputs_and_grads(y, {x});
      r.push_back(mha.in_proj_weight.grad());
      r.push_back(mha.in_proj_bias.grad());
      return r;
    };
    const auto want = run(AttentionPath::Materialized, 0, 0);
    for (auto [qr, kr] : {std::pair<std::size_t, std::size_t>{2, 3}, {4, 4}, {0, 0}}) {
      SCOPED_TRACE("MultiheadAttention, blocks " + std::to_string(qr) + " x " + std::to_string(kr));
      expect_close(run(AttentionPath::Tiled, qr, kr), want, rel);
    }
  }
}

TEST(AttentionTiled, LargeFiniteMaskRowsMatchInDouble) { expect_large_finite_masks_agree<double>(1e-12); }

TEST(AttentionTiled, LargeFiniteMaskRowsMatchInFloat) { expect_large_finite_masks_agree<float>(1e-5); }

TEST(AttentionTiled, MultiheadAttentionInBothLayouts) {
  constexpr std::int64_t E = 8, H = 2, N = 2, L = 6, S = 9;
  for (bool batch_first : {false, true})
    for (bool self : {true, false}) {
      SCOPED_TRACE("batch_first=" + std::to_string(batch_first) + " self=" + std::to_string(self));
      manual_seed(1);
      nn::MultiheadAttention<double> mha(nn::MultiheadAttentionOptions(E, H).dropout(0.2).batch_first(batch_first));
      const std::size_t len_kv = self ? L : S;
      BoolArray padding = BoolArray::from_shape({N, len_kv});
      std::fill(padding.begin(), padding.end(), false);
      padding(0, len_kv - 1) = padding(1, 0) = true;
      const Array<double> bias = input({L, len_kv}, 3).value();
      auto layout = [&](std::int64_t len) {
        return batch_first ? Shape{N, std::size_t(len), E} : Shape{std::size_t(len), N, E};
      };
      auto run = [&](AttentionPath path) {
        PathGuard guard(path, 2, 4);
        mha.zero_grad();
        manual_seed(7);  // the module's dropout draws from the default generator
        T64 x = input(layout(L), 4), kv = self ? x : input(layout(S), 5);
        auto [y, w] = mha.forward(x, kv, kv, padding, /*need_weights=*/false, Array<double>(bias), true,
                                  /*is_causal=*/false);
        EXPECT_FALSE(w.defined());
        auto r = outputs_and_grads(y, self ? std::vector<T64>{x} : std::vector<T64>{x, kv});
        r.push_back(mha.in_proj_weight.grad());
        r.push_back(mha.out_proj->weight.grad());
        return r;
      };
      expect_close(run(AttentionPath::Tiled), run(AttentionPath::Materialized), 1e-12);
    }
}

// The same values whatever the thread count (bit for bit) and the block sizes (to rounding; the
// dropout mask is the same).
TEST(AttentionTiled, IndependentOfThreadsAndBlocks) {
  const int threads = get_num_threads();
  const Case<double> c{"causal, dropout", {2, 3, 100, 16}, {2, 3, 100, 16}, {2, 3, 100, 16}, {}, true, 0.2};
  set_num_threads(1);
  const auto one = sdpa_run(c, AttentionPath::Tiled, 8, 8);
  set_num_threads(2);
  const auto two = sdpa_run(c, AttentionPath::Tiled, 8, 8);
  const auto other_blocks = sdpa_run(c, AttentionPath::Tiled, 24, 40);
  const auto materialized = sdpa_run(c, AttentionPath::Materialized);
  set_num_threads(threads);
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << i;
  expect_close(other_blocks, one, 1e-12);
  expect_close(materialized, one, 1e-12);
}

// Under autocast both paths run their gemms on bf16-rounded operands (the forward's decision,
// recorded for the backward): they agree to bf16's precision.
TEST(AttentionTiled, AutocastMatchesMaterialized) {
  const Case<float> c{"causal", {2, 3, 20, 8}, {2, 3, 20, 8}, {2, 3, 20, 8}, {}, true};
  const auto fp32 = sdpa_run(c, AttentionPath::Tiled, 4, 8);
  AutocastGuard autocast;
  const auto bf16 = sdpa_run(c, AttentionPath::Tiled, 4, 8);
  expect_close(bf16, sdpa_run(c, AttentionPath::Materialized), 2e-2);
  EXPECT_GT(max_abs_diff(bf16[0], fp32[0]), 1e-5) << "the tiled path's gemms did not round to bf16";
}

// need_weights keeps the materialized path whatever the setting; Auto picks by size.
TEST(AttentionTiled, WeightsAlwaysMaterialized) {
  PathGuard guard(AttentionPath::Tiled);
  EXPECT_EQ(get_attention_path(), AttentionPath::Tiled);
  detail::AttentionArgs<double> args;
  args.need_weights = true;
  const T64 q = input({2, 5, 4}, 1), k = input({2, 6, 4}, 2), v = input({2, 6, 3}, 3);
  auto [o, w] = detail::attention(q, k, v, args);
  ASSERT_TRUE(w.defined());
  EXPECT_EQ(w.shape(), Shape({2, 5, 6}));
  EXPECT_LT(max_abs_diff(o.value(), scaled_dot_product_attention(q, k, v).value()), 1e-12);
}

// The materialized path refuses (B, L, S) arrays beyond the process's memory, naming the shape
// and the bytes; the tiled path runs the same call; Auto's choice by size.
TEST(AttentionTiled, MaterializedPathChecksMemoryFirst) {
  detail::set_process_memory_limit_for_testing(1 << 20);
  const T64 q = input({2, 300, 4}, 1), k = input({2, 300, 4}, 2), v = input({2, 300, 4}, 3);
  {
    PathGuard guard(AttentionPath::Materialized);
    XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v), "scaled_dot_product_attention",
                           "(B, L, S) = (2, 300, 300)", "1440000 bytes", "1048576 bytes");
    Generator g(1);
    XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v, {}, 0.1, false, std::nullopt, false, &g),
                           "dropout multipliers", "2880000 bytes");
  }
  {
    PathGuard guard(AttentionPath::Tiled);
    EXPECT_EQ(scaled_dot_product_attention(q, k, v).shape(), Shape({2, 300, 4}));
  }
  // Auto: 300 x 300 logits take the tiled path when causal (from 256^2), not otherwise (from 1024^2).
  EXPECT_EQ(get_attention_path(), AttentionPath::Auto);
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, {}, 0.0, true).shape(), Shape({2, 300, 4}));
  XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(q, k, v), "(B, L, S) = (2, 300, 300)");
  // From 64 MiB of arrays up, the check is against what the process can still get.
  {
    PathGuard guard(AttentionPath::Materialized);
    const T64 lq = input({1, 4096, 2}, 4), lk = input({1, 4096, 2}, 5), lv = input({1, 4096, 2}, 6);
    detail::release_array_cache();  // the guard counts the thread's cached buffers as available too
    XGRAD_EXPECT_THROW_MSG(scaled_dot_product_attention(lq, lk, lv), "(B, L, S) = (1, 4096, 4096)",
                           "134217728 bytes", "1048576 bytes this process can still get");
  }
  detail::set_process_memory_limit_for_testing(0);
  EXPECT_GT(detail::process_memory_limit(), std::size_t(1) << 24);
  // Real values: what it can still get is below its limit, and more than nothing.
  EXPECT_LT(detail::process_memory_available(), detail::process_memory_limit());
  EXPECT_GT(detail::process_memory_available(), std::size_t(1) << 20);
}
