// autograd::Function (core/function.hpp): user ops with their own backward; gradcheck on one and several outputs,
// non-differentiable outputs, saved tensors' version check, needs_input_grad, saved_data.
#include "test_util.hpp"

#include <string>
#include <vector>

using namespace xgrad;
using namespace xgrad::testing;
using xgrad::autograd::AutogradContext;

namespace {

// y = x * sigmoid(x) * scale; dy/dx = scale * s (1 + x (1 - s)).
struct ScaledSiLU : autograd::Function<ScaledSiLU> {
  static T64 forward(AutogradContext<double>* ctx, T64 x, double scale) {
    ctx->save_for_backward({x});
    ctx->saved_data["scale"] = scale;
    Array<double> s = 1.0 / (1.0 + xt::exp(-x.value()));
    return T64(Array<double>(x.value() * s * scale));
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    const Array<double> x = ctx->get_saved_variables()[0].value();
    double scale = std::any_cast<double>(ctx->saved_data.at("scale"));
    Array<double> s = 1.0 / (1.0 + xt::exp(-x));
    return {T64(Array<double>(g[0].value() * scale * s * (1.0 + x * (1.0 - s))))};
  }
};

// (a*b, a+b, sign(a)): two differentiable outputs and one that is not.
struct MulAdd : autograd::Function<MulAdd> {
  static std::vector<T64> forward(AutogradContext<double>* ctx, T64 a, T64 b) {
    ctx->save_for_backward({a, b});
    T64 sign(Array<double>(xt::sign(a.value())));
    ctx->mark_non_differentiable({sign});
    return {T64(Array<double>(a.value() * b.value())), T64(Array<double>(a.value() + b.value())), sign};
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    auto saved = ctx->get_saved_variables();
    T64 ga, gb;
    if (ctx->needs_input_grad(0)) ga = T64(Array<double>(g[0].value() * saved[1].value() + g[1].value()));
    if (ctx->needs_input_grad(1)) gb = T64(Array<double>(g[0].value() * saved[0].value() + g[1].value()));
    return {ga, gb};
  }
};

std::vector<bool> seen_needs;
struct Record : autograd::Function<Record> {
  static T64 forward(AutogradContext<double>* ctx, T64 a, T64 b) {
    seen_needs = {ctx->needs_input_grad(0), ctx->needs_input_grad(1)};
    return T64(Array<double>(a.value() + b.value()));
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0], g[0]}; }
};

}  // namespace

TEST(AutogradFunction, GradcheckSingleOutputWithSavedData) {
  expect_gradcheck([](const Inputs& in) { return ScaledSiLU::apply(in[0], 1.5); }, {input({3, 4})});
}

TEST(AutogradFunction, GradcheckSeveralOutputs) {
  expect_gradcheck([](const Inputs& in) {
    auto o = MulAdd::apply(in[0], in[1]);
    return o[0] * 2.0 + o[1] * o[1];
  }, {input({2, 3}, 1), input({2, 3}, 2)});
  // Only one output reached: the other's gradient is zeros.
  expect_gradcheck([](const Inputs& in) { return MulAdd::apply(in[0], in[1])[1]; }, {input({2, 3}, 3), input({2, 3}, 4)});
}

TEST(AutogradFunction, NonDifferentiableOutput) {
  auto o = MulAdd::apply(input({2}, 1), input({2}, 2));
  EXPECT_TRUE(o[0].requires_grad());
  EXPECT_FALSE(o[2].requires_grad());
}

TEST(AutogradFunction, InPlaceChangeOfSavedTensorThrows) {
  auto x = input({3});
  auto y = ScaledSiLU::apply(x, 1.0);
  x.mutable_value()(0) += 1.0;
  EXPECT_THROW(sum(y).backward(), std::invalid_argument);
}

TEST(AutogradFunction, NeedsInputGrad) {
  auto a = input({2});
  auto b = from_vector<double>({1.0, 2.0}, {2}, false);
  Record::apply(a, b);
  EXPECT_EQ(seen_needs, (std::vector<bool>{true, false}));
  Record::apply(b, a);
  EXPECT_EQ(seen_needs, (std::vector<bool>{false, true}));
  auto o = MulAdd::apply(a, b);
  sum(o[0]).backward();
  EXPECT_TRUE(a.has_grad());
  EXPECT_FALSE(b.has_grad());
}

TEST(AutogradFunction, NoGraphWithoutGradInputs) {
  auto b = from_vector<double>({1.0, 2.0}, {2}, false);
  EXPECT_FALSE(ScaledSiLU::apply(b, 1.0).requires_grad());
}

// docs/autograd.md's example, verbatim.
namespace {
using xgrad::autograd::AutogradContext;
struct Scale : xgrad::autograd::Function<Scale> {
  static Tensor<double> forward(AutogradContext<double>* ctx, const Tensor<double>& x, double k) {
    ctx->save_for_backward({x});          // version-checked: an in-place change of x then throws
    ctx->saved_data["k"] = k;             // std::map<std::string, std::any>
    return Tensor<double>(Array<double>(x.value() * k));
  }
  static std::vector<Tensor<double>> backward(AutogradContext<double>* ctx,
                                              std::vector<Tensor<double>> grad_outputs) {
    double k = std::any_cast<double>(ctx->saved_data.at("k"));
    if (!ctx->needs_input_grad(0)) return {Tensor<double>()};
    return {Tensor<double>(Array<double>(grad_outputs[0].value() * k))};
  }
};
}  // namespace

TEST(AutogradFunction, ReadmeExample) {
  auto x = input({2, 3});
  auto y = Scale::apply(x, 3.0);
  sum(y).backward();
  EXPECT_EQ(x.grad(), Array<double>(xt::ones<double>({2, 3}) * 3.0));
  expect_gradcheck([](const Inputs& in) { return Scale::apply(in[0], 3.0); }, {input({2, 3})});
}

// ---- names and undefined outputs ------------------------------------------------------------

namespace user_ops {

struct Nothing : autograd::Function<Nothing> {  // forgets to return its result
  static T64 forward(AutogradContext<double>*, T64) { return T64(); }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0]}; }
};

struct HalfPair : autograd::Function<HalfPair> {  // the second of two outputs is undefined
  static std::vector<T64> forward(AutogradContext<double>*, T64 x) { return {T64(Array<double>(x.value())), T64()}; }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0]}; }
};

struct WrongShape : autograd::Function<WrongShape> {  // backward returns a gradient of another shape
  static T64 forward(AutogradContext<double>*, T64 x) { return T64(Array<double>(x.value() * 2.0)); }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64>) {
    return {T64(Array<double>(xt::ones<double>({7})))};
  }
};

struct TooMany : autograd::Function<TooMany> {  // two gradients for one input
  static T64 forward(AutogradContext<double>*, T64 x) { return T64(Array<double>(x.value() * 2.0)); }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0], g[0]}; }
};

}  // namespace user_ops

// An undefined output of forward is refused at apply, naming the Function (demangled) and the
// output, with or without grad; it used to surface later as "the tensor is undefined".
TEST(AutogradFunction, AnUndefinedOutputIsRefusedNamingTheFunctionAndTheOutput) {
  const T64 x = input({3});
  const std::string single =
      "autograd::Function user_ops::Nothing: forward returned an undefined tensor; expected a "
      "defined one (an output that gets no gradient: ctx->mark_non_differentiable)";
  EXPECT_EQ(error_of([&] { user_ops::Nothing::apply(x); }), single);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(error_of([&] { user_ops::Nothing::apply(x); }), single);
  }
  EXPECT_EQ(error_of([&] { user_ops::HalfPair::apply(x); }),
            "autograd::Function user_ops::HalfPair: forward returned an undefined tensor as output 1 of 2; expected "
            "a defined one (an output that gets no gradient: ctx->mark_non_differentiable)");
  EXPECT_EQ(error_of([] { T64().backward(); }),
            "backward: called on an undefined tensor (a default-constructed Tensor, with no value and no graph)");
}

// A custom Function's nodes are named as PyTorch names its grad_fn ("SiLUBackward"), demangled,
// in every message that names an op.
TEST(AutogradFunction, NamedAsWrittenNotMangled) {
  const T64 x = input({3});
  EXPECT_STREQ(user_ops::WrongShape::apply(x).op(), "user_ops::WrongShapeBackward");
  const std::string shape = error_of([&] { sum(user_ops::WrongShape::apply(x)).backward(); });
  EXPECT_NE(shape.find("the backward of 'user_ops::WrongShapeBackward' produced a gradient of shape"),
            std::string::npos)
      << shape;
  EXPECT_EQ(error_of([&] { sum(user_ops::TooMany::apply(x)).backward(); }),
            "autograd::Function user_ops::TooMany: backward should return 1 gradients (one per argument of forward), "
            "got 2");
}

// ---- backward's arity as LibTorch's ------------------------------------------------------------

namespace user_ops {

// forward(ctx, a, scale, b, name) = scale * a * b; backward returns one gradient per argument of
// forward, undefined for the non-Tensor ones, as LibTorch requires.
struct ScaledMul : autograd::Function<ScaledMul> {
  static T64 forward(AutogradContext<double>* ctx, T64 a, double scale, T64 b, std::string) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["scale"] = scale;
    return T64(Array<double>(a.value() * b.value() * scale));
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    auto saved = ctx->get_saved_variables();
    const double scale = std::any_cast<double>(ctx->saved_data.at("scale"));
    return {T64(Array<double>(g[0].value() * saved[1].value() * scale)), T64(),
            T64(Array<double>(g[0].value() * saved[0].value() * scale)), T64()};
  }
};

// The same with two outputs (a * scale, b * scale), through the several-outputs path.
struct ScaledPair : autograd::Function<ScaledPair> {
  static std::vector<T64> forward(AutogradContext<double>* ctx, double scale, T64 a, T64 b) {
    ctx->saved_data["scale"] = scale;
    return {T64(Array<double>(a.value() * scale)), T64(Array<double>(b.value() * scale))};
  }
  static std::vector<T64> backward(AutogradContext<double>* ctx, std::vector<T64> g) {
    const double scale = std::any_cast<double>(ctx->saved_data.at("scale"));
    return {T64(), T64(Array<double>(g[0].value() * scale)), T64(Array<double>(g[1].value() * scale))};
  }
};

struct ThreeOfFour : autograd::Function<ThreeOfFour> {  // neither one per argument nor one per Tensor
  static T64 forward(AutogradContext<double>*, T64 a, double, T64 b) {
    return T64(Array<double>(a.value() + b.value()));
  }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0], g[0], g[0], g[0]}; }
};

struct GradForADouble : autograd::Function<GradForADouble> {  // a defined gradient for the double
  static T64 forward(AutogradContext<double>*, T64 a, double) { return T64(Array<double>(a.value() * 2.0)); }
  static std::vector<T64> backward(AutogradContext<double>*, std::vector<T64> g) { return {g[0], g[0]}; }
};

}  // namespace user_ops

TEST(AutogradFunction, BackwardMayReturnOneGradientPerArgumentAsLibTorch) {
  expect_gradcheck([](const Inputs& in) { return user_ops::ScaledMul::apply(in[0], 1.5, in[1], std::string("x")); },
                   {input({2, 3}), input({2, 3}, 2)});
  expect_gradcheck(
      [](const Inputs& in) {
        auto out = user_ops::ScaledPair::apply(0.5, in[0], in[1]);
        return out[0] * 2.0 + out[1] * out[1];
      },
      {input({3}), input({3}, 2)});
  // Today's form (one per Tensor argument) still works beside it: ScaledSiLU above returns one.
  auto a = input({2});
  auto b = input({2}, 3);
  sum(user_ops::ScaledMul::apply(a, 2.0, b, std::string())).backward();
  EXPECT_EQ(a.grad(), Array<double>(b.value() * 2.0));
  EXPECT_EQ(b.grad(), Array<double>(a.value() * 2.0));
}

TEST(AutogradFunction, BackwardWithAnotherArityIsRefusedNamingTheFunction) {
  const T64 a = input({3});
  const T64 b = input({3}, 2);
  EXPECT_EQ(error_of([&] { sum(user_ops::ThreeOfFour::apply(a, 1.0, b)).backward(); }),
            "autograd::Function user_ops::ThreeOfFour: backward should return 3 gradients (one per argument of "
            "forward, an undefined Tensor for a non-Tensor one) or 2 (one per Tensor argument), got 4");
  EXPECT_EQ(error_of([&] { sum(user_ops::GradForADouble::apply(a, 1.0)).backward(); }),
            "autograd::Function user_ops::GradForADouble: backward returned a defined gradient at position 1, but "
            "argument 1 of forward is not a Tensor; expected an undefined Tensor there");
}
