// The fused linear + GELU of the feed-forward block (ops/linear_gelu.hpp) against linear then gelu:
// values and every gradient bit for bit, float and double, both GELU forms, with and without a
// bias, under bf16 autocast, at 1, 2 and 3 threads, at sizes that take each of linear's paths
// (one block; row blocks over the pool; the gemm cutting columns, the bias fill and GELU by rows).
// Also linear's bias fill and bias gradient on the pool, the forward's one fork/join, gradgradcheck
// through its formula, and the unfused recording under a trace.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>

#include <xgrad/backend/autocast.hpp>
#include <xgrad/nn/transformer.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/ops/linear_gelu.hpp>

#include "bitwise.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// (rows..., in) -> out: one block (under 2^20 multiply-adds), row blocks (rows >= out), and the
// gemm's column split (out > rows); out not a multiple of the SIMD width, so rows have tails.
struct Case {
  const char* name;
  Shape x;
  std::size_t out;
};
const Case kCases[] = {{"small", {2, 3, 8}, 13}, {"row_blocks", {4, 45, 96}, 83}, {"column_split", {37, 96}, 301}};

template <class T>
using Arrays = std::vector<Array<T>>;

// The output and the gradients of x, W (and b) for a fixed random upstream gradient.
template <class T>
Arrays<T> run(const Case& c, bool bias, const std::string& approximate, bool fused) {
  const Tensor<T> x = random_leaf<T>(c.x, 1), w = random_leaf<T>({c.out, c.x.back()}, 2);
  const Tensor<T> b = bias ? random_leaf<T>({c.out}, 3) : Tensor<T>();
  const Tensor<T> y = fused ? detail::linear_gelu(x, w, b, approximate) : gelu(linear(x, w, b), approximate);
  Generator g(4);
  y.backward(randn<T>(y.shape(), g, false));
  Arrays<T> out{y.value(), x.grad(), w.grad()};
  if (bias) out.push_back(b.grad());
  return out;
}

template <class T>
void expect_bitwise(const Arrays<T>& want, const Arrays<T>& got, const std::string& what) {
  xgrad::testing::expect_bitwise(want, got, what, "0: output, then dx, dW, db");
}

template <class T>
void expect_fused_equals_unfused(bool autocast) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const Case& c : kCases)
      for (bool bias : {true, false})
        for (const char* approximate : {"none", "tanh"}) {
          const AutocastGuard mode(autocast);
          const std::string what = std::string(c.name) + (bias ? "" : ", no bias") + ", approximate " + approximate +
                                   ", " + std::to_string(threads) + " threads" + (autocast ? ", autocast" : "");
          expect_bitwise(run<T>(c, bias, approximate, false), run<T>(c, bias, approximate, true), what);
        }
  }
}

TEST(LinearGelu, EqualsLinearThenGeluBitForBitInFloat) { expect_fused_equals_unfused<float>(false); }
TEST(LinearGelu, EqualsLinearThenGeluBitForBitInDouble) { expect_fused_equals_unfused<double>(false); }
TEST(LinearGelu, EqualsLinearThenGeluBitForBitUnderAutocast) { expect_fused_equals_unfused<float>(true); }

// The bias gradient is summed by column blocks, each column's rows in order: the serial loop's bits
// at any thread count.
TEST(LinearGelu, LinearBiasGradientIsTheSerialSumAtAnyThreadCount) {
  ThreadCountGuard guard;
  const Shape sx{300, 16};
  const std::size_t out = 500;
  Generator g(7);
  const Array<float> dy = randn<float>({sx[0], out}, g, false).value();
  Array<float> want = Array<float>::from_shape({out});
  for (std::size_t j = 0; j < out; ++j) {
    float s = 0.0f;
    for (std::size_t r = 0; r < sx[0]; ++r) s += dy(r, j);
    want(j) = s;
  }
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor<float> x = random_leaf<float>(sx, 1), w = random_leaf<float>({out, sx[1]}, 2),
                        b = random_leaf<float>({out}, 3);
    linear(x, w, b).backward(Tensor<float>(dy));
    EXPECT_EQ(std::memcmp(want.data(), b.grad().data(), out * sizeof(float)), 0) << threads << " threads";
  }
}

// The forward is one fork/join: bias, gemm and GELU in each of the gemm's blocks (linear then gelu
// take two, and linear filled the bias serially before its gemm). Linear's bias gradient
// alone is one parallel job (a serial loop before).
TEST(LinearGelu, ForwardIsOneForkJoinAndTheBiasGradientRunsOnThePool) {
  const Tensor<float> x = random_leaf<float>({1024, 64}, 1), w = random_leaf<float>({256, 64}, 2),
                      b = random_leaf<float>({256}, 3);
  EXPECT_EQ(jobs_at_two_threads([&] { gelu(linear(x, w, b)); }), 2);
  EXPECT_EQ(jobs_at_two_threads([&] { detail::linear_gelu(x, w, b); }), 1);
  EXPECT_EQ(jobs_at_two_threads([&] { linear(x, w, b); }), 1);
  // More columns than rows: the gemm's 16-column tiles, bias and GELU in each.
  const Tensor<float> xw = random_leaf<float>({64, 64}, 1), ww = random_leaf<float>({1024, 64}, 2),
                      bw = random_leaf<float>({1024}, 3);
  EXPECT_EQ(jobs_at_two_threads([&] { detail::linear_gelu(xw, ww, bw); }), 1);
  EXPECT_EQ(jobs_at_two_threads([&] { linear(xw, ww, bw); }), 1);
  const Tensor<float> xc = x.detach(), wc = w.detach();
  const Tensor<float> y = linear(xc, wc, b);  // only the bias needs a gradient
  Generator g(5);
  const Array<float> dy = randn<float>(y.shape(), g, false).value();
  // Two jobs: the copy of dy into the seed gradient (copy_array, fixed blocks from 64K elements)
  // and the bias gradient's column blocks (main ran both serially: 0).
  EXPECT_EQ(jobs_at_two_threads([&] { y.backward(Tensor<float>(dy)); }), 2);
}

// GELU's value and derivative depend on the element alone, not on where it sits (a SIMD body or the
// tail of the array): what lets linear_gelu apply it block by block. Each element is compared
// with itself at every shift of a ragged array (main computed the tail with the C library's
// erf/tanh, 1-2 ulp off xsimd's).
template <class T>
void expect_gelu_position_independent(const char* approximate) {
  const std::size_t n = 1000 + 7;
  const Tensor<T> x = random_leaf<T>({n}, 11);
  Generator g(12);
  const Array<T> dy = randn<T>({n}, g, false).value();
  const Tensor<T> y = gelu(x, approximate);
  y.backward(Tensor<T>(dy));
  for (std::size_t shift = 1; shift < 17; ++shift) {
    const std::int64_t len = static_cast<std::int64_t>(n - shift);
    Array<T> xv = Array<T>::from_shape({n - shift}), dyv = Array<T>::from_shape({n - shift});
    std::copy(x.value().data() + shift, x.value().data() + n, xv.data());
    std::copy(dy.data() + shift, dy.data() + n, dyv.data());
    const Tensor<T> xs(xv, true);
    const Tensor<T> ys = gelu(xs, approximate);
    ys.backward(Tensor<T>(dyv));
    for (std::int64_t i = 0; i < len; ++i) {
      ASSERT_EQ(y.value()(i + shift), ys.value()(i)) << approximate << ", shift " << shift << ", element " << i;
      ASSERT_EQ(x.grad()(i + shift), xs.grad()(i)) << approximate << ", shift " << shift << ", element " << i;
    }
  }
}

TEST(LinearGelu, GeluIsTheSameWhereverAnElementSits) {
  for (const char* approximate : {"none", "tanh"}) {
    expect_gelu_position_independent<float>(approximate);
    expect_gelu_position_independent<double>(approximate);
  }
}

TEST(LinearGelu, GradcheckAndGradgradcheck) {
  for (const char* approximate : {"none", "tanh"})
    for (bool bias : {true, false}) {
      const auto f = [approximate, bias](const Inputs& in) {
        return detail::linear_gelu(in[0], in[1], bias ? in[2] : T64(), approximate);
      };
      const Inputs in{input({2, 3, 4}, 1), input({5, 4}, 2), input({5}, 3)};
      expect_gradcheck(f, in);
      const GradcheckResult r = gradgradcheck(f, in);
      EXPECT_TRUE(r.passed) << r.summary();
    }
}

// While recording, the op records linear then gelu (what exporters know), with the same values.
TEST(LinearGelu, RecordsLinearAndGeluUnderATrace) {
  const Tensor<float> x = random_leaf<float>({2, 3, 8}, 1), w = random_leaf<float>({6, 8}, 2),
                      b = random_leaf<float>({6}, 3);
  const Tensor<float> want = detail::linear_gelu(x, w, b, "tanh");
  trace::Recorder recorder;
  const Tensor<float> got = detail::linear_gelu(x, w, b, "tanh");
  ASSERT_EQ(recorder.ops().size(), 2u);
  EXPECT_EQ(recorder.ops()[0].type, "linear");
  EXPECT_EQ(recorder.ops()[1].type, "gelu");
  EXPECT_EQ(recorder.ops()[1].text("approximate"), "tanh");
  EXPECT_EQ(max_abs_diff(want.value(), got.value()), 0.0);
}

// The transformer layers' feed-forward block runs linear_gelu for gelu and gelu_tanh, and linear then
// gelu while a trace records: the layer's output and every gradient are the same bits either way.
template <class Layer, class Run>
Arrays<float> layer_run(Layer& layer, const Run& run, bool recording) {
  layer.zero_grad();
  const Tensor<float> x = random_leaf<float>({2, 24, 32}, 21), memory = random_leaf<float>({2, 24, 32}, 22);
  Tensor<float> y;
  if (recording) {
    trace::Recorder recorder;
    y = run(x, memory);
  } else {
    y = run(x, memory);
  }
  Generator g(23);
  y.backward(randn<float>(y.shape(), g, false));
  Arrays<float> out{y.value(), x.grad()};
  for (const auto& p : layer.parameters()) out.push_back(p.grad());
  return out;
}

TEST(LinearGelu, TransformerLayersFeedForwardIsFusedWithTheSameBits) {
  for (const char* activation : {"gelu", "gelu_tanh"}) {
    nn::TransformerEncoderLayer<float> enc(nn::TransformerEncoderLayerOptions(32, 4)
                                               .dim_feedforward(80)
                                               .dropout(0.0)
                                               .activation(activation)
                                               .batch_first(true));
    const auto run_enc = [&](const Tensor<float>& x, const Tensor<float>&) { return enc.forward(x); };
    expect_bitwise(layer_run(enc, run_enc, true), layer_run(enc, run_enc, false),
                   std::string("encoder layer, ") + activation);
    nn::TransformerDecoderLayer<float> dec(nn::TransformerDecoderLayerOptions(32, 4)
                                               .dim_feedforward(80)
                                               .dropout(0.0)
                                               .activation(activation)
                                               .batch_first(true));
    const auto run_dec = [&](const Tensor<float>& x, const Tensor<float>& m) { return dec.forward(x, m); };
    expect_bitwise(layer_run(dec, run_dec, true), layer_run(dec, run_dec, false),
                   std::string("decoder layer, ") + activation);
  }
}

TEST(LinearGelu, RefusesBadArgumentsByName) {
  const Tensor<float> x = random_leaf<float>({2, 8}, 1), w = random_leaf<float>({6, 8}, 2),
                      b = random_leaf<float>({5}, 3);
  XGRAD_EXPECT_THROW_MSG(detail::linear_gelu(x, w, b), "linear_gelu", "bias of shape (6)", "(5)");
  XGRAD_EXPECT_THROW_MSG(detail::linear_gelu(x, w, Tensor<float>(), "exact"), "linear_gelu", "\"exact\"");
}

}  // namespace
