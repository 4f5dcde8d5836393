// add_layer_norm and add_layer_norm_with_sum (xgrad/ops/layer_norm.cpp): the fused residual add +
// LayerNorm gives the unfused graph's values and every gradient bit for bit (float and double,
// with and without weight and bias, with one or both outputs used), at 1, 2 and 3 threads; the
// transformer layers use it; a trace records the unfused ops.
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/core/trace.hpp>

#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// The pool splits rows into pieces of at least 16K elements: {4, 250, 64} gives 3 pieces at 3
// threads; D = 37 leaves a SIMD tail in each row.
const Shape kPieces{4, 250, 64};
const Shape kTail{3, 5, 37};
const Shape kRows{2, 300, 64};  // 2 pieces at 2 threads

enum class Affine { weight_and_bias, weight_only, none };
// Which outputs the loss reads: post-norm (y only, add_layer_norm), pre-norm (s + f(y)), and the
// two halves of the two-output form alone.
enum class Use { post_norm, pre_norm, y_only, s_only };

template <class T>
struct Case {
  Tensor<T> x, r, w, b;
  Case(const Shape& shape, Affine affine) {
    const std::size_t d = shape.back();
    x = random_leaf<T>(shape, 1);
    r = random_leaf<T>(shape, 2);
    if (affine != Affine::none) w = random_leaf<T>({d}, 3);
    if (affine == Affine::weight_and_bias) b = random_leaf<T>({d}, 4);
  }
  std::vector<Tensor<T>> params() const {
    std::vector<Tensor<T>> p{x, r};
    if (w.defined()) p.push_back(w);
    if (b.defined()) p.push_back(b);
    return p;
  }
};

// The loss's output for the pair (s, y); tanh makes dy depend on y.
template <class T>
Tensor<T> combine(Use use, const Tensor<T>& s, const Tensor<T>& y) {
  switch (use) {
    case Use::post_norm:
    case Use::y_only:
      return tanh(y);
    case Use::pre_norm:
      return s + tanh(y);
    case Use::s_only:
      return tanh(s);
  }
  return {};
}

// out's value, then each input's gradient after out.backward(fixed random upstream).
template <class T>
std::vector<Array<T>> run(const Shape& shape, Affine affine, Use use, bool fused) {
  const Case<T> c(shape, affine);
  const std::size_t d = shape.back();
  Tensor<T> out;
  if (!fused) {
    const Tensor<T> s = c.x + c.r;
    out = combine(use, s, layer_norm(s, Shape{d}, c.w, c.b, 1e-5));
  } else if (use == Use::post_norm) {
    out = combine(use, Tensor<T>(), add_layer_norm(c.x, c.r, Shape{d}, c.w, c.b, 1e-5));
  } else {
    const auto [s, y] = add_layer_norm_with_sum(c.x, c.r, Shape{d}, c.w, c.b, 1e-5);
    out = combine(use, s, y);
  }
  Generator g(99);
  out.backward(randn<T>(shape, g, false));
  std::vector<Array<T>> got{out.value()};
  // A parameter the loss does not reach (weight and bias when only s is used) has no gradient in
  // either graph: an empty array stands for it.
  for (const auto& p : c.params()) got.push_back(p.has_grad() ? p.grad() : Array<T>(typename Array<T>::shape_type{0}));
  return got;
}

template <class T>
void expect_bitwise(const std::vector<Array<T>>& want, const std::vector<Array<T>>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  const char* names[] = {"value", "x.grad", "r.grad", "weight.grad", "bias.grad"};
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].shape(), got[i].shape()) << what << " " << names[i];
    if (want[i].size() == 0) continue;  // no gradient in either graph: no buffer to compare
    EXPECT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(T)), 0)
        << what << " " << names[i] << ": not bitwise equal to the unfused graph's, max |diff| "
        << max_abs_diff(want[i], got[i]);
  }
}

template <class T>
void check_all(const char* type) {
  for (const Shape& shape : {kTail, kRows})
    for (Affine affine : {Affine::weight_and_bias, Affine::weight_only, Affine::none})
      for (Use use : {Use::post_norm, Use::pre_norm, Use::y_only, Use::s_only}) {
        const std::string what = std::string(type) + " shape " + std::to_string(shape.back()) + " affine " +
                                 std::to_string(static_cast<int>(affine)) + " use " +
                                 std::to_string(static_cast<int>(use));
        expect_bitwise(run<T>(shape, affine, use, false), run<T>(shape, affine, use, true), what);
      }
}

}  // namespace

TEST(AddLayerNorm, EqualsAddThenLayerNormBitwiseWithEveryGradient) {
  check_all<float>("float");
  check_all<double>("double");
}

TEST(AddLayerNorm, IsBitwiseTheSameAt1To3Threads) {
  ThreadCountGuard guard;
  for (Use use : {Use::post_norm, Use::pre_norm}) {
    set_num_threads(1);
    const auto want = run<float>(kPieces, Affine::weight_and_bias, use, true);
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      const std::string what = "threads " + std::to_string(threads) + " use " + std::to_string(static_cast<int>(use));
      expect_bitwise(want, run<float>(kPieces, Affine::weight_and_bias, use, true), what);
      expect_bitwise(run<float>(kPieces, Affine::weight_and_bias, use, false),
                     run<float>(kPieces, Affine::weight_and_bias, use, true), what + " (fused vs unfused)");
    }
  }
}

TEST(AddLayerNorm, BroadcastingResidualTakesTheUnfusedOps) {
  const Case<double> c({2, 3, 4}, Affine::weight_and_bias);
  const Tensor<double> r = random_leaf<double>({4}, 5);
  const Tensor<double> y = add_layer_norm(c.x, r, Shape{4}, c.w, c.b, 1e-5);
  EXPECT_STREQ(y.op(), "layer_norm");
  EXPECT_LE(max_abs_diff(y.value(), layer_norm(c.x + r, Shape{4}, c.w, c.b, 1e-5).value()), 0.0);
}

TEST(AddLayerNorm, NamesItselfInErrors) {
  const Case<float> c({2, 4}, Affine::none);
  XGRAD_EXPECT_THROW_MSG(add_layer_norm(c.x, c.r, Shape{4}, random_leaf<float>({3}, 6)),
                         "add_layer_norm: expected weight of shape (4)", "got (3)");
  XGRAD_EXPECT_THROW_MSG(add_layer_norm_with_sum(c.x, c.r, Shape{5}),
                         "add_layer_norm: expected input with trailing shape (5)", "got (2, 4)");
}

TEST(AddLayerNorm, NoGradGivesPlainResults) {
  const Case<float> c({2, 4}, Affine::weight_and_bias);
  const NoGradGuard no_grad;
  const auto [s, y] = add_layer_norm_with_sum(c.x, c.r, Shape{4}, c.w, c.b, 1e-5);
  EXPECT_FALSE(s.requires_grad());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_LE(max_abs_diff(s.value(), (c.x + c.r).value()), 0.0);
  EXPECT_LE(max_abs_diff(y.value(), layer_norm(c.x + c.r, Shape{4}, c.w, c.b, 1e-5).value()), 0.0);
}

TEST(AddLayerNorm, ATraceRecordsTheUnfusedAddAndLayerNorm) {
  const Case<float> c({2, 4}, Affine::weight_and_bias);
  std::vector<std::string> types;
  {
    trace::Recorder recorder;
    add_layer_norm(c.x, c.r, Shape{4}, c.w, c.b, 1e-5);
    add_layer_norm_with_sum(c.x, c.r, Shape{4}, c.w, c.b, 1e-5);
    for (const auto& op : recorder.ops()) types.push_back(op.type);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"add", "layer_norm", "add", "layer_norm"}));
}

TEST(AddLayerNorm, SecondOrderMatchesTheUnfusedGraph) {
  // d/dx of sum(grad_x . v) through the create_graph formula, fused against unfused.
  for (bool pre_norm : {false, true}) {
    std::vector<Array<double>> results;
    for (bool fused : {false, true}) {
      const Case<double> c({3, 6}, Affine::weight_and_bias);
      Tensor<double> out;
      if (!fused) {
        const Tensor<double> s = c.x + c.r;
        out = pre_norm ? s + tanh(layer_norm(s, Shape{6}, c.w, c.b, 1e-5)) : tanh(layer_norm(s, Shape{6}, c.w, c.b));
      } else if (pre_norm) {
        const auto [s, y] = add_layer_norm_with_sum(c.x, c.r, Shape{6}, c.w, c.b, 1e-5);
        out = s + tanh(y);
      } else {
        out = tanh(add_layer_norm(c.x, c.r, Shape{6}, c.w, c.b, 1e-5));
      }
      const auto g = autograd::grad({sum(out * out)}, {c.x, c.w}, {}, std::nullopt, /*create_graph=*/true);
      const auto gg = autograd::grad({sum(g[0] * g[0]) + sum(g[1] * g[1])}, {c.x, c.r, c.w, c.b});
      for (const auto& t : g) results.push_back(t.value());
      for (const auto& t : gg) results.push_back(t.value());
    }
    const std::size_t n = results.size() / 2;
    for (std::size_t i = 0; i < n; ++i) EXPECT_LE(max_abs_diff(results[i], results[n + i]), 1e-10);
  }
}

TEST(AddLayerNorm, TheTransformerLayersUseIt) {
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer<float> enc(
        nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).norm_first(norm_first));
    nn::TransformerDecoderLayer<float> dec(
        nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).dropout(0.0).norm_first(norm_first));
    const Tensor<float> x = random_leaf<float>({3, 2, 8}, 7);
    const Tensor<float> y = enc.forward(x);
    const Tensor<float> z = dec.forward(x, x);
    // post-norm ends in the fused node; pre-norm in the last residual add, over the fused pair's s.
    const char* want = norm_first ? "add" : "add_layer_norm";
    EXPECT_STREQ(y.op(), want);
    EXPECT_STREQ(z.op(), want);
    if (norm_first) {
      EXPECT_STREQ(y.node()->inputs[0]->op, "add_layer_norm");
      EXPECT_STREQ(z.node()->inputs[0]->op, "add_layer_norm");
    }
  }
}

TEST(AddLayerNorm, RetainedGraphRunsTwiceAndHooksSeeEachOutputsGradient) {
  Array<double> want_x, want_w;  // the unfused run's, compared with the fused one's
  for (bool fused : {false, true}) {
    const Case<double> c({3, 6}, Affine::weight_and_bias);
    Tensor<double> s, y;
    if (fused) {
      std::tie(s, y) = add_layer_norm_with_sum(c.x, c.r, Shape{6}, c.w, c.b, 1e-5);
    } else {
      s = c.x + c.r;
      y = layer_norm(s, Shape{6}, c.w, c.b, 1e-5);
    }
    int seen = 0;
    s.register_hook([&seen](const Array<double>&) { ++seen; });
    y.register_hook([](const Array<double>& g) { return Array<double>(g * 2.0); });
    const Tensor<double> out = s + tanh(y);
    Generator g(3);
    const Array<double> up = randn<double>({3, 6}, g, false).value();
    out.backward(Tensor<double>(up), /*retain_graph=*/true);
    const Array<double> once = c.x.grad();
    out.backward(Tensor<double>(up));
    EXPECT_EQ(seen, 2);
    EXPECT_LE(max_abs_diff(c.x.grad(), Array<double>(2.0 * once)), 1e-12);
    if (!fused) {
      want_x = c.x.grad();
      want_w = c.w.grad();
    } else {
      EXPECT_EQ(max_abs_diff(c.x.grad(), want_x), 0.0);
      EXPECT_EQ(max_abs_diff(c.w.grad(), want_w), 0.0);
    }
  }
}

TEST(AddLayerNorm, AnInputChangedInPlaceBeforeTheBackwardIsRefusedByName) {
  const Case<float> c({2, 4}, Affine::weight_and_bias);
  const Tensor<float> y = add_layer_norm(c.x, c.r, Shape{4}, c.w, c.b, 1e-5);
  Tensor<float> r = c.r;
  r.mutable_value()(0, 0) += 1.0f;
  try {
    sum(y * y).backward();
    ADD_FAILURE() << "expected the backward to refuse the changed input";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("add_layer_norm's input 1"), std::string::npos) << e.what();
  }
}
