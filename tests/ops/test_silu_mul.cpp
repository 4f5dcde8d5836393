// The gated MLP's fused activation (ops/silu_mul.hpp) against silu then mul: the value and both
// gradients bit for bit, float and double, at 1, 2 and 3 threads, for sizes with SIMD tails and one
// that splits over the pool, with values around 0 and large of either sign, for each set of operands
// that need grad; the first-order gradients under create_graph, gradgradcheck through its formula,
// PyTorch's values (tests/fixtures/silu_mul_*.json), silu's SIMD sigmoid against the formula, the
// unfused recording under a trace, and the refusal of a shape mismatch.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <xgrad/backend/parallel.hpp>
#include <xgrad/core/trace.hpp>
#include <xgrad/ops/silu_mul.hpp>

#include "fixture.hpp"
#include "bitwise.hpp"
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// Not multiples of any SIMD width (but {8}); the last one over the pool's serial threshold.
const Shape kShapes[] = {{1}, {7}, {8}, {3, 17}, {2, 5, 33}, {300, 257}};

// Standard normal values times 4, with the specials spread over the first elements: 0 of both
// signs, values around 0, and large ones where sigmoid saturates (exp overflows past ~88 in float).
template <class T>
Tensor<T> gate_values(const Shape& shape, bool requires_grad) {
  Generator g(11);
  Array<T> v = randn<T>(shape, g, false).value() * T(4);
  const T specials[] = {T(0),  T(-0.0), T(1e-30), T(-1e-30), T(1e-6), T(-1e-6), T(0.5),  T(-0.5),
                        T(20), T(-20),  T(90),    T(-90),    T(1e4),  T(-1e4),  T(1e30), T(-1e30)};
  for (std::size_t i = 0; i < std::size(specials); ++i) v.data()[(i * 7) % v.size()] = specials[i];
  return Tensor<T>(std::move(v), requires_grad);
}

template <class T>
using Arrays = std::vector<Array<T>>;

// The output and the gradients asked for, for a fixed random upstream gradient.
template <class T>
Arrays<T> run(const Shape& shape, bool gate_grad, bool up_grad, bool fused) {
  const Tensor<T> gate = gate_values<T>(shape, gate_grad);
  Tensor<T> up = random_leaf<T>(shape, 12);
  up.requires_grad_(up_grad);
  const Tensor<T> y = fused ? silu_mul(gate, up) : silu(gate) * up;
  Arrays<T> out{y.value()};
  if (!gate_grad && !up_grad) return out;
  Generator g(13);
  y.backward(randn<T>(shape, g, false));
  if (gate_grad) out.push_back(gate.grad());
  if (up_grad) out.push_back(up.grad());
  return out;
}

template <class T>
void expect_bitwise(const Arrays<T>& want, const Arrays<T>& got, const std::string& what) {
  xgrad::testing::expect_bitwise(want, got, what, "0: output, then d_gate, d_up");
}

template <class T>
void expect_fused_equals_unfused() {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const Shape& shape : kShapes)
      for (const auto& [gate_grad, up_grad] : {std::pair{true, true}, {true, false}, {false, true}, {false, false}}) {
        const std::string what = shape_str(shape) + (gate_grad ? ", d_gate" : "") + (up_grad ? ", d_up" : "") + ", " +
                                 std::to_string(threads) + " threads";
        expect_bitwise(run<T>(shape, gate_grad, up_grad, false), run<T>(shape, gate_grad, up_grad, true), what);
      }
  }
}

}  // namespace

TEST(SiluMul, EqualsSiluThenMulBitForBitInFloat) { expect_fused_equals_unfused<float>(); }
TEST(SiluMul, EqualsSiluThenMulBitForBitInDouble) { expect_fused_equals_unfused<double>(); }

// Under create_graph the gradients come from the formula (differentiable ops): the same bits as the
// unfused ops' formulas, and differentiable again.
TEST(SiluMul, CreateGraphGradientsEqualSiluThenMul) {
  const Shape shape{3, 17};
  const auto grads = [&](bool fused) {
    const Tensor<float> gate = gate_values<float>(shape, true), up = random_leaf<float>(shape, 12);
    const Tensor<float> y = fused ? silu_mul(gate, up) : silu(gate) * up;
    Generator g(13);
    const auto d = autograd::grad({y}, {gate, up}, {randn<float>(shape, g, false)}, std::nullopt, true);
    EXPECT_TRUE(d[0].requires_grad() && d[1].requires_grad());
    return Arrays<float>{d[0].value(), d[1].value()};
  };
  expect_bitwise(grads(false), grads(true), "create_graph");
}

TEST(SiluMul, Gradgradcheck) {
  for (const Shape& s : {Shape{5}, Shape{2, 3, 4}}) {
    SCOPED_TRACE(shape_str(s));
    const Inputs in{input(s, 1), input(s, 2)};
    const auto f = [](const Inputs& x) { return silu_mul(x[0], x[1]); };
    expect_gradcheck(f, in);
    const GradcheckResult r = gradgradcheck(f, in);
    EXPECT_TRUE(r.passed) << r.summary();
  }
}

// PyTorch's F.silu(gate) * up and its gradients (scripts/make_fixtures.py).
template <class T>
void expect_golden(const std::string& name, double tolerance) {
  const Fixture f = load_fixture(name);
  const Tensor<T> gate = f.tensor<T>("gate", true), up = f.tensor<T>("up", true);
  const Tensor<T> y = silu_mul(gate, up);
  EXPECT_LT(max_abs_diff(y.value(), f.array<T>("output")), tolerance);
  y.backward(f.tensor<T>("grad_output"));
  EXPECT_LT(max_abs_diff(gate.grad(), f.array<T>("grad.gate")), tolerance);
  EXPECT_LT(max_abs_diff(up.grad(), f.array<T>("grad.up")), tolerance);
}

TEST(SiluMul, GoldenFromPyTorchFloat64) { expect_golden<double>("silu_mul_float64", 1e-12); }
TEST(SiluMul, GoldenFromPyTorchFloat32) { expect_golden<float>("silu_mul_float32", 1e-5); }

// What an exporter sees: silu then mul, the same values.
TEST(SiluMul, RecordsSiluThenMulUnderATrace) {
  const Tensor<float> gate = random_leaf<float>({2, 9}, 1), up = random_leaf<float>({2, 9}, 2);
  const Tensor<float> want = silu_mul(gate, up);
  trace::Recorder recorder;
  const Tensor<float> got = silu_mul(gate, up);
  ASSERT_EQ(recorder.ops().size(), 2u);
  EXPECT_EQ(recorder.ops()[0].type, "silu");
  EXPECT_EQ(recorder.ops()[1].type, "mul");
  EXPECT_EQ(max_abs_diff(want.value(), got.value()), 0.0);
}

// silu's sigmoid comes from SIMD batches (with silu_mul's): its float values and gradient are
// within a few ulps of the formula in double, from -100 to 100 (1,001 values: a SIMD tail), and
// silu(-inf) is NaN and silu(inf) inf, as x / (1 + exp(-x)) in PyTorch.
TEST(SiluMul, SilusSimdSigmoidMatchesTheFormula) {
  const std::size_t n = 1001;
  Array<float> x = empty_array<float>({n}, "test");
  for (std::size_t i = 0; i < n; ++i) x.data()[i] = -100.0f + 0.2f * static_cast<float>(i);
  const Tensor<float> t(x, true);
  const Tensor<float> y = silu(t);
  y.backward(ones<float>({n}));
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x.data()[i], s = 1 / (1 + std::exp(-v));
    const double want_y = v * s, want_d = s * (1 + v * (1 - s));
    EXPECT_NEAR(y.value().data()[i], want_y, 1e-6 * std::max(1.0, std::abs(want_y))) << "x = " << v;
    EXPECT_NEAR(t.grad().data()[i], want_d, 1e-6 * std::max(1.0, std::abs(want_d))) << "x = " << v;
  }
  const float inf = std::numeric_limits<float>::infinity();
  const Array<float> ends = silu(Tensor<float>(Array<float>{-inf, inf, 0.0f})).value();
  EXPECT_TRUE(std::isnan(ends(0)));
  EXPECT_EQ(ends(1), inf);
  EXPECT_EQ(ends(2), 0.0f);
}

TEST(SiluMul, RefusesShapesThatDifferNamingBoth) {
  const Tensor<float> gate = random_leaf<float>({2, 3}, 1);
  XGRAD_EXPECT_THROW_MSG(silu_mul(gate, random_leaf<float>({2, 4}, 2)), "silu_mul", "gate (2, 3)", "up (2, 4)");
  XGRAD_EXPECT_THROW_MSG(silu_mul(gate, random_leaf<float>({3}, 2)), "silu_mul", "gate (2, 3)", "up (3)");
}
