// A Linear with its LoRA adapter as one op (ops/lora_linear.hpp) against the ops it fuses,
// linear(x, W, b) + linear(linear(x, A), B * s): the value and every gradient bit for bit, float and
// double, at 1, 2 and 3 threads, with and without a bias, for sizes under and over the pool's split,
// for each set of operands that need grad (a frozen base, as LoRA trains it, included); the
// gradients under create_graph and gradgradcheck through its formula; the unfused ops under bf16
// autocast and under a trace; the refusal of misshaped adapters; and nn::LoraLayer running it when
// its dropout is off (eval mode included) and the unfused ops while dropout trains.
#include <xgrad/backend/autocast.hpp>
#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/nn/lora.hpp>
#include <xgrad/ops/lora_linear.hpp>

#include "bitwise.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// x's shape, out features, rank: a vector, a batch under the split, and (L, in) = (300, 96) with
// 160 outputs, over the gemms' split (2^20 multiply-adds) for the base, the adapter and the
// gradients, with more rows than columns and (up) more columns than rows.
struct Case {
  Shape x;
  std::size_t out, r;
};
const Case kCases[] = {{{5}, 3, 2}, {{2, 7, 9}, 11, 4}, {{300, 96}, 160, 8}, {{64, 96}, 400, 16}};

template <class T>
using Arrays = std::vector<Array<T>>;

// Which of x, W, b, A, B require grad.
struct Needs {
  bool x, w, b, a, lb;
};
const Needs kNeeds[] = {{true, true, true, true, true},
                        {true, false, false, true, true},   // LoRA: the base frozen
                        {false, false, false, true, true},  // the first layer: x is data
                        {true, false, false, false, false},
                        {false, false, false, false, false}};

// The ops lora_linear fuses, in the order LoraLayer runs them.
template <class T>
Tensor<T> unfused(const Tensor<T>& x, const Tensor<T>& w, const Tensor<T>& bias, const Tensor<T>& a, const Tensor<T>& b,
                  T s) {
  const Tensor<T> base = linear(x, w, bias);
  const Tensor<T> u = linear(x, a);
  return base + linear(u, b * s);
}

// The output, then the gradients asked for in the order x, W, b, A, B, for a fixed random upstream
// gradient; B is random (PEFT starts it at zero, which would hide a wrong product).
template <class T>
Arrays<T> run(const Case& c, bool with_bias, const Needs& n, bool fused) {
  const std::size_t in = c.x.back();
  Tensor<T> x = random_leaf<T>(c.x, 1), w = random_leaf<T>({c.out, in}, 2), a = random_leaf<T>({c.r, in}, 4),
            b = random_leaf<T>({c.out, c.r}, 5);
  Tensor<T> bias = with_bias ? random_leaf<T>({c.out}, 3) : Tensor<T>();
  x.requires_grad_(n.x);
  w.requires_grad_(n.w);
  if (with_bias) bias.requires_grad_(n.b);
  a.requires_grad_(n.a);
  b.requires_grad_(n.lb);
  const double s = 2.5;
  const Tensor<T> y = fused ? detail::lora_linear(x, w, bias, a, b, s) : unfused(x, w, bias, a, b, T(s));
  Arrays<T> out{y.value()};
  if (!y.requires_grad()) return out;
  Generator g(6);
  y.backward(randn<T>(y.shape(), g, false));
  for (const Tensor<T>* t : {&x, &w, &bias, &a, &b})
    if (t->defined() && t->requires_grad()) out.push_back(t->grad());
  return out;
}

template <class T>
void expect_fused_equals_unfused() {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const Case& c : kCases)
      for (bool with_bias : {true, false})
        for (std::size_t k = 0; k < std::size(kNeeds); ++k) {
          const std::string what = shape_str(c.x) + " out " + std::to_string(c.out) + " r " + std::to_string(c.r) +
                                   (with_bias ? ", bias" : "") + ", needs #" + std::to_string(k) + ", " +
                                   std::to_string(threads) + " threads";
          expect_bitwise(run<T>(c, with_bias, kNeeds[k], false), run<T>(c, with_bias, kNeeds[k], true), what,
                         "0: output, then the gradients of x, W, b, A, B that are asked for");
        }
  }
}

}  // namespace

TEST(LoraLinear, EqualsTheUnfusedOpsBitForBitInFloat) { expect_fused_equals_unfused<float>(); }
TEST(LoraLinear, EqualsTheUnfusedOpsBitForBitInDouble) { expect_fused_equals_unfused<double>(); }

// Under create_graph the gradients come from the formula (matmuls): the unfused ops' values within
// rounding (the formula's products are grouped differently), and differentiable again.
TEST(LoraLinear, CreateGraphGradientsMatchTheUnfusedOps) {
  const auto grads = [](bool fused) {
    const Tensor<double> x = random_leaf<double>({2, 3, 5}, 1), w = random_leaf<double>({4, 5}, 2),
                         bias = random_leaf<double>({4}, 3), a = random_leaf<double>({2, 5}, 4),
                         b = random_leaf<double>({4, 2}, 5);
    const Tensor<double> y = fused ? detail::lora_linear(x, w, bias, a, b, 0.5) : unfused(x, w, bias, a, b, 0.5);
    Generator g(6);
    const auto d = autograd::grad({y}, {x, w, bias, a, b}, {randn<double>(y.shape(), g, false)}, std::nullopt, true);
    Arrays<double> out;
    for (const Tensor<double>& t : d) {
      // With a constant upstream gradient only the bias's gradient (g summed) is constant.
      EXPECT_EQ(t.requires_grad(), &t != &d[2]);
      out.push_back(t.value());
    }
    return out;
  };
  const Arrays<double> want = grads(false), got = grads(true);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_LT(max_abs_diff(want[i], got[i]), 1e-12) << "gradient " << i;
}

TEST(LoraLinear, Gradgradcheck) {
  const Inputs in{input({2, 3, 5}, 1), input({4, 5}, 2), input({4}, 3), input({2, 5}, 4), input({4, 2}, 5)};
  const auto f = [](const Inputs& t) { return detail::lora_linear(t[0], t[1], t[2], t[3], t[4], 1.5); };
  expect_gradcheck(f, in);
  const GradcheckResult r = gradgradcheck(f, in);
  EXPECT_TRUE(r.passed) << r.summary();
}

// What an exporter sees: the three linears, the scaling and the sum.
TEST(LoraLinear, RecordsTheUnfusedOpsUnderATrace) {
  const Tensor<float> x = random_leaf<float>({2, 6}, 1), w = random_leaf<float>({3, 6}, 2),
                      a = random_leaf<float>({2, 6}, 4), b = random_leaf<float>({3, 2}, 5);
  const Tensor<float> want = detail::lora_linear(x, w, Tensor<float>(), a, b, 2.0);
  trace::Recorder recorder;
  const Tensor<float> got = detail::lora_linear(x, w, Tensor<float>(), a, b, 2.0);
  std::vector<std::string> types;
  for (const auto& op : recorder.ops()) types.push_back(op.type);
  EXPECT_EQ(types, (std::vector<std::string>{"linear", "linear", "mul", "linear", "add"}));
  EXPECT_EQ(max_abs_diff(want.value(), got.value()), 0.0);
}

// bf16 autocast: linear's own casts, so the unfused ops' bits.
TEST(LoraLinear, RunsTheUnfusedOpsUnderAutocast) {
  const Tensor<float> x = random_leaf<float>({40, 64}, 1), w = random_leaf<float>({48, 64}, 2),
                      a = random_leaf<float>({4, 64}, 4), b = random_leaf<float>({48, 4}, 5);
  const AutocastGuard bf16(true);
  const Tensor<float> want = unfused(x, w, Tensor<float>(), a, b, 2.0f);
  const Tensor<float> got = detail::lora_linear(x, w, Tensor<float>(), a, b, 2.0);
  EXPECT_EQ(max_abs_diff(want.value(), got.value()), 0.0);
}

TEST(LoraLinear, RefusesMisshapedAdaptersNamingTheShapes) {
  const Tensor<float> x = random_leaf<float>({2, 6}, 1), w = random_leaf<float>({3, 6}, 2);
  const Tensor<float> a = random_leaf<float>({2, 6}, 4), b = random_leaf<float>({3, 2}, 5);
  XGRAD_EXPECT_THROW_MSG(detail::lora_linear(x, w, Tensor<float>(), random_leaf<float>({2, 5}, 4), b, 1.0),
                         "lora_linear", "lora_A of shape (r, 6)", "(2, 5)");
  XGRAD_EXPECT_THROW_MSG(detail::lora_linear(x, w, Tensor<float>(), a, random_leaf<float>({3, 4}, 5), 1.0),
                         "lora_linear", "lora_B of shape (3, 2)", "(3, 4)");
  XGRAD_EXPECT_THROW_MSG(detail::lora_linear(random_leaf<float>({2, 5}, 1), w, Tensor<float>(), a, b, 1.0),
                         "lora_linear", "input features 5");
}

namespace {

// The fused op or the sum that a LoRA Linear's forward runs, from the profiler.
std::vector<std::string> profiled_ops(nn::Linear<float>& layer, const Tensor<float>& x) {
  profiler::Profile p;
  layer.forward(x);
  p.stop();
  std::vector<std::string> names;
  for (const auto& e : p.events())
    if (e.name == "lora_linear" || e.name == "add") names.push_back(e.name);
  return names;
}

}  // namespace

// The layer fuses when its dropout is off (none, or eval mode) and gives the values of the unfused
// sum (its B random, as after training); while dropout trains, the unfused ops with their mask.
TEST(LoraLinear, LoraLayerFusesUnlessDropoutTrains) {
  for (double p : {0.0, 0.1}) {
    SCOPED_TRACE("lora_dropout " + std::to_string(p));
    nn::Linear<float> layer(8, 5);
    auto lora = std::make_shared<nn::LoraLayer<float>>(layer, nn::LoraConfig().r(2).lora_alpha(4).lora_dropout(p));
    layer.set_adapter(lora);
    lora->lora_B->weight.mutable_value() = random_leaf<float>({5, 2}, 7).value();
    const Tensor<float> x = random_leaf<float>({3, 8}, 1);
    if (p > 0) {
      EXPECT_EQ(profiled_ops(layer, x), std::vector<std::string>{"add"});
      layer.eval();
    }
    EXPECT_EQ(profiled_ops(layer, x), std::vector<std::string>{"lora_linear"});
    const Tensor<float> want = unfused(x, layer.weight, layer.bias, lora->lora_A->weight, lora->lora_B->weight, 2.0f);
    EXPECT_EQ(max_abs_diff(want.value(), layer.forward(x).value()), 0.0);
  }
}
