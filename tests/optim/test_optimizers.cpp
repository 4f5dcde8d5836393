// SGD, Adam and AdamW against torch 1.13's formulas recomputed here in long
// double on one small parameter over three steps; option validation; skipping parameters
// without a gradient; zero_grad; parameter groups; the per-parameter state.
#include "test_util.hpp"

#include <cmath>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {

using LD = long double;
using Vec = std::vector<LD>;

// The gradients fed at steps 1, 2, 3 (set directly, so that each formula sees known numbers).
const std::vector<std::vector<double>> kGrads = {{0.5, -1.5, 2.0}, {0.25, 0.75, -3.0}, {-1.0, 0.5, 1e-3}};
const std::vector<double> kTheta0 = {1.0, -2.0, 0.5};

T64 make_param() { return from_vector<double>(kTheta0, {3}, true); }
Array<double> arr(const std::vector<double>& v) { return from_vector<double>(v, {v.size()}).value(); }

// Relative check, per element: |a - b| <= tol * max(1, |b|).
void expect_close(const Array<double>& got, const Vec& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double b = static_cast<double>(want[i]);
    EXPECT_LE(std::abs(got(i) - b), tol * std::max(1.0, std::abs(b))) << what << " element " << i << ": got "
                                                                       << got(i) << ", want " << b;
  }
}

struct SGDRef {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  Vec theta = Vec(kTheta0.begin(), kTheta0.end());
  Vec buf = {};

  void step(const std::vector<double>& grad) {
    for (std::size_t i = 0; i < theta.size(); ++i) {
      LD g = maximize ? -LD(grad[i]) : LD(grad[i]);  // torch 1.13 negates before weight decay
      g += LD(weight_decay) * theta[i];
      if (momentum != 0) {
        if (buf.size() < theta.size()) buf.push_back(g);  // first step: b = g
        else buf[i] = LD(momentum) * buf[i] + (1 - LD(dampening)) * g;
        g = nesterov ? g + LD(momentum) * buf[i] : buf[i];
      }
      theta[i] -= LD(lr) * g;
    }
  }
};

struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, maximize = false, decoupled = false;
  Vec theta = Vec(kTheta0.begin(), kTheta0.end()), m = {}, v = {}, vmax = {};
  int t = 0;

  void step(const std::vector<double>& grad) {
    if (t == 0) m = v = vmax = Vec(theta.size(), 0);
    ++t;
    const LD bc1 = 1 - std::pow(LD(beta1), t);
    const LD bc2 = 1 - std::pow(LD(beta2), t);
    for (std::size_t i = 0; i < theta.size(); ++i) {
      LD g = maximize ? -LD(grad[i]) : LD(grad[i]);
      if (decoupled) theta[i] -= LD(lr) * LD(weight_decay) * theta[i];
      else g += LD(weight_decay) * theta[i];
      m[i] = LD(beta1) * m[i] + (1 - LD(beta1)) * g;
      v[i] = LD(beta2) * v[i] + (1 - LD(beta2)) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const LD denom = std::sqrt(amsgrad ? vmax[i] : v[i]) / std::sqrt(bc2) + LD(eps);
      theta[i] -= LD(lr) / bc1 * m[i] / denom;
    }
  }
};

template <class Ref>
void run_three_steps(Optimizer<double>& opt, T64& p, Ref& ref, double tol, const std::string& what) {
  for (std::size_t s = 0; s < kGrads.size(); ++s) {
    p.set_grad(arr(kGrads[s]));
    opt.step();
    ref.step(kGrads[s]);
    expect_close(p.value(), ref.theta, tol, what + " after step " + std::to_string(s + 1));
  }
}

}  // namespace

// ---- SGD ----------------------------------------------------------------------------------------

TEST(OptimSGD, PlainStepIsThetaMinusLrGrad) {
  auto p = make_param();
  SGD<double> opt({p}, SGDOptions(0.1));
  p.set_grad(Array<double>{0.5, -1.5, 2.0});
  opt.step();
  // by hand: 1 - 0.05, -2 + 0.15, 0.5 - 0.2
  EXPECT_DOUBLE_EQ(p.value()(0), 0.95);
  EXPECT_DOUBLE_EQ(p.value()(1), -1.85);
  EXPECT_DOUBLE_EQ(p.value()(2), 0.3);
  EXPECT_FALSE(opt.state(p).has("momentum_buffer")) << "no momentum, no buffer";
}

TEST(OptimSGD, FormulaOverThreeSteps) {
  struct Case {
    const char* name;
    SGDOptions options;
  };
  const std::vector<Case> cases = {
      {"plain", SGDOptions(0.1)},
      {"momentum", SGDOptions(0.1).momentum(0.9)},
      {"dampening", SGDOptions(0.1).momentum(0.9).dampening(0.3)},
      {"nesterov", SGDOptions(0.05).momentum(0.8).nesterov(true)},
      {"weight_decay", SGDOptions(0.1).momentum(0.5).weight_decay(0.2)},
      {"maximize", SGDOptions(0.1).momentum(0.9).weight_decay(0.1).maximize(true)},
  };
  for (const auto& c : cases) {
    auto p = make_param();
    SGD<double> opt({p}, c.options);
    SGDRef ref{c.options.lr(), c.options.momentum(), c.options.dampening(), c.options.weight_decay(),
               c.options.nesterov(), c.options.maximize()};
    run_three_steps(opt, p, ref, 1e-14, c.name);
  }
}

TEST(OptimSGD, FirstMomentumStepTakesTheGradientUndamped) {
  // step 1: b = g + wd θ (not (1 - dampening) g); step 2: b = μ b + (1 - τ) g
  auto p = make_param();
  SGD<double> opt({p}, SGDOptions(0.1).momentum(0.9).dampening(0.5).weight_decay(0.1));
  p.set_grad(Array<double>{1.0, 2.0, 3.0});
  opt.step();
  const Array<double> b1 = opt.state(p).at("momentum_buffer");
  EXPECT_DOUBLE_EQ(b1(0), 1.0 + 0.1 * 1.0);
  EXPECT_DOUBLE_EQ(b1(1), 2.0 + 0.1 * -2.0);
  EXPECT_DOUBLE_EQ(b1(2), 3.0 + 0.1 * 0.5);
  const Array<double> theta1 = p.value();
  p.set_grad(Array<double>{0.0, 0.0, 0.0});
  opt.step();
  const Array<double> b2 = opt.state(p).at("momentum_buffer");
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(b2(i), 0.9 * b1(i) + 0.5 * 0.1 * theta1(i), 1e-15);
}

TEST(OptimSGD, Validation) {
  auto p = make_param();
  XGRAD_EXPECT_THROW_MSG(SGD<double>({p}, SGDOptions(-1)), "SGD: invalid learning rate -1");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({p}, SGDOptions(0.1).momentum(-0.5)), "SGD: invalid momentum value -0.5");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({p}, SGDOptions(0.1).weight_decay(-0.1)), "SGD: invalid weight_decay value -0.1");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({p}, SGDOptions(0.1).nesterov(true)),
                         "SGD: nesterov momentum requires a momentum and zero dampening");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({p}, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)),
                         "nesterov momentum requires a momentum and zero dampening");
  EXPECT_NO_THROW(SGD<double>({p}, SGDOptions(0.1).momentum(0.9).nesterov(true)));
  // a group's own options are validated too
  XGRAD_EXPECT_THROW_MSG(SGD<double>({ParamGroup<double>({p}, SGDOptions(-2))}, SGDOptions(0.1)),
                         "SGD: invalid learning rate -2");
}

// ---- Adam / AdamW -------------------------------------------------------------------------------

TEST(OptimAdam, FirstStepMovesEachParameterByLr) {
  // t = 1: m = (1-β1) g, v = (1-β2) g², so θ1 = θ0 - lr g / (|g| + eps)
  auto p = make_param();
  Adam<double> opt({p}, AdamOptions().lr(0.01));
  p.set_grad(Array<double>{0.5, -1.5, 2.0});
  opt.step();
  EXPECT_NEAR(p.value()(0), 1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p.value()(1), -2.0 + 0.01 * 1.5 / (1.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p.value()(2), 0.5 - 0.01 * 2.0 / (2.0 + 1e-8), 1e-15);
  const ParamState<double> s = opt.state(p);
  EXPECT_EQ(s.step, 1);
  ASSERT_TRUE(s.has("exp_avg") && s.has("exp_avg_sq"));
  EXPECT_FALSE(s.has("max_exp_avg_sq"));
  EXPECT_NEAR(s.at("exp_avg")(1), 0.1 * -1.5, 1e-16);
  EXPECT_NEAR(s.at("exp_avg_sq")(1), 0.001 * 2.25, 1e-17);
}

TEST(OptimAdam, DefaultsAreTorchs) {
  const AdamOptions a;
  EXPECT_EQ(a.lr(), 1e-3);
  EXPECT_EQ(a.betas()[0], 0.9);
  EXPECT_EQ(a.betas()[1], 0.999);
  EXPECT_EQ(a.eps(), 1e-8);
  EXPECT_EQ(a.weight_decay(), 0.0);
  EXPECT_FALSE(a.amsgrad());
  EXPECT_FALSE(a.maximize());
  const AdamWOptions w;
  EXPECT_EQ(w.lr(), 1e-3);
  EXPECT_EQ(w.weight_decay(), 1e-2);
  EXPECT_EQ(w.eps(), 1e-8);
  EXPECT_EQ(w.betas()[1], 0.999);
}

TEST(OptimAdam, FormulaOverThreeSteps) {
  struct Case {
    const char* name;
    AdamOptions options;
  };
  const std::vector<Case> cases = {
      {"default", AdamOptions()},
      {"lr_betas_eps", AdamOptions(0.05).betas({0.8, 0.9}).eps(1e-3)},
      {"weight_decay", AdamOptions(0.01).weight_decay(0.1)},
      // betas (0.9, 0.5) make v shrink after the large step-2 gradient, so the max matters
      {"amsgrad", AdamOptions(0.01).betas({0.9, 0.5}).amsgrad(true)},
      {"maximize", AdamOptions(0.01).weight_decay(0.05).maximize(true)},
  };
  for (const auto& c : cases) {
    auto p = make_param();
    Adam<double> opt({p}, c.options);
    AdamRef ref{c.options.lr(), c.options.betas()[0], c.options.betas()[1], c.options.eps(),
                c.options.weight_decay(), c.options.amsgrad(), c.options.maximize(), false};
    run_three_steps(opt, p, ref, 1e-14, c.name);
    EXPECT_EQ(opt.state(p).step, 3) << c.name;
    EXPECT_EQ(opt.state(p).has("max_exp_avg_sq"), c.options.amsgrad()) << c.name;
  }
}

TEST(OptimAdam, LongParameterVectorizedAndTailAlike) {
  // 37 elements: whole SIMD batches plus a scalar remainder, every option flag combination
  const std::size_t n = 37;
  std::vector<double> theta0(n);
  std::vector<std::vector<double>> grads(3, std::vector<double>(n));
  for (std::size_t i = 0; i < n; ++i) {
    theta0[i] = std::sin(1.0 + i);
    for (std::size_t s = 0; s < 3; ++s) grads[s][i] = std::cos(0.3 * i + s) * (s == 1 ? 4.0 : 1.0);
  }
  for (int flags = 0; flags < 8; ++flags) {
    const bool maximize = flags & 1, amsgrad = flags & 2, decoupled = flags & 4;
    auto p = from_vector<double>(theta0, {n}, true);
    std::unique_ptr<Optimizer<double>> opt;
    const std::vector<T64> params = {p};
    if (decoupled)
      opt = std::make_unique<AdamW<double>>(
          params, AdamWOptions(0.01).betas({0.9, 0.5}).weight_decay(0.1).amsgrad(amsgrad).maximize(maximize));
    else
      opt = std::make_unique<Adam<double>>(
          params, AdamOptions(0.01).betas({0.9, 0.5}).weight_decay(0.1).amsgrad(amsgrad).maximize(maximize));
    AdamRef ref{0.01, 0.9, 0.5, 1e-8, 0.1, amsgrad, maximize, decoupled};
    ref.theta = Vec(theta0.begin(), theta0.end());
    for (const auto& g : grads) {
      p.set_grad(arr(g));
      opt->step();
      ref.step(g);
    }
    expect_close(p.value(), ref.theta, 1e-14, "flags " + std::to_string(flags));
  }
}

TEST(OptimAdam, AmsgradUsesTheRunningMaximum) {
  auto p = make_param(), q = make_param();
  Adam<double> with({p}, AdamOptions(0.01).betas({0.9, 0.5}).amsgrad(true));
  Adam<double> without({q}, AdamOptions(0.01).betas({0.9, 0.5}));
  for (const auto& g : kGrads) {
    p.set_grad(arr(g));
    q.set_grad(p.grad());
    with.step();
    without.step();
  }
  const ParamState<double> s = with.state(p);
  // v at step 3 fell below its step-2 value in element 2 (g = 1e-3 after g = -3): the max kept it
  EXPECT_GT(s.at("max_exp_avg_sq")(2), s.at("exp_avg_sq")(2));
  EXPECT_GT(max_abs_diff(p.value(), q.value()), 1e-6);
}

TEST(OptimAdamW, DecoupledWeightDecayOverThreeSteps) {
  for (const bool amsgrad : {false, true}) {
    auto p = make_param();
    AdamW<double> opt({p}, AdamWOptions(0.05).weight_decay(0.1).amsgrad(amsgrad).betas({0.9, 0.5}));
    AdamRef ref{0.05, 0.9, 0.5, 1e-8, 0.1, amsgrad, false, true};
    run_three_steps(opt, p, ref, 1e-14, amsgrad ? "adamw amsgrad" : "adamw");
  }
  auto p = make_param();
  AdamW<double> opt({p});  // default weight_decay 0.01
  AdamRef ref{1e-3, 0.9, 0.999, 1e-8, 0.01, false, false, true};
  run_three_steps(opt, p, ref, 1e-14, "adamw defaults");
}

TEST(OptimAdamW, EqualsAdamWithoutWeightDecayAndDiffersWithIt) {
  auto a = make_param(), w = make_param();
  Adam<double> adam({a}, AdamOptions(0.01));
  AdamW<double> adamw({w}, AdamWOptions(0.01).weight_decay(0));
  for (const auto& g : kGrads) {
    a.set_grad(arr(g));
    w.set_grad(a.grad());
    adam.step();
    adamw.step();
  }
  EXPECT_EQ(max_abs_diff(a.value(), w.value()), 0.0);
  // coupled (Adam) and decoupled (AdamW) weight decay give different results
  auto a2 = make_param(), w2 = make_param();
  Adam<double> adam2({a2}, AdamOptions(0.01).weight_decay(0.1));
  AdamW<double> adamw2({w2}, AdamWOptions(0.01).weight_decay(0.1));
  a2.set_grad(Array<double>{0.5, -1.5, 2.0});
  w2.set_grad(a2.grad());
  adam2.step();
  adamw2.step();
  EXPECT_GT(max_abs_diff(a2.value(), w2.value()), 1e-6);
}

TEST(OptimAdam, Validation) {
  auto p = make_param();
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions(-1)), "Adam: invalid learning rate -1");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions().betas({1.5, 0.999})),
                         "Adam: invalid beta parameter at index 0: 1.5");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions().betas({0.9, 1.0})),
                         "Adam: invalid beta parameter at index 1: 1");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions().betas({-0.1, 0.9})),
                         "Adam: invalid beta parameter at index 0: -0.1");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions().eps(-1e-8)), "Adam: invalid epsilon value -1e-08");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({p}, AdamOptions().weight_decay(-0.5)), "Adam: invalid weight_decay value -0.5");
  XGRAD_EXPECT_THROW_MSG(AdamW<double>({p}, AdamWOptions(-0.5)), "AdamW: invalid learning rate -0.5");
  XGRAD_EXPECT_THROW_MSG(AdamW<double>({p}, AdamWOptions().betas({0.9, 2.0})),
                         "AdamW: invalid beta parameter at index 1: 2");
  EXPECT_NO_THROW(Adam<double>({p}, AdamOptions(0).betas({0, 0}).eps(0)));
}

TEST(OptimAdam, FloatFollowsTheDoubleFormula) {
  auto p = from_vector<float>({1.0f, -2.0f, 0.5f}, {3}, true);
  Adam<float> opt({p}, AdamOptions(0.01).weight_decay(0.1).amsgrad(true));
  AdamRef ref{0.01, 0.9, 0.999, 1e-8, 0.1, true, false, false};
  for (const auto& g : kGrads) {
    p.set_grad(Array<float>{float(g[0]), float(g[1]), float(g[2])});
    opt.step();
    ref.step(g);
  }
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(p.value()(i), double(ref.theta[i]), 1e-6);
}

// ---- what every optimizer shares ------------------------------------------------------------------

TEST(Optimizer, ParametersWithoutGradientAreSkipped) {
  auto a = make_param(), b = make_param();
  for (int kind = 0; kind < 3; ++kind) {
    a = make_param();
    b = make_param();
    std::unique_ptr<Optimizer<double>> opt;
    const std::vector<T64> params = {a, b};
    if (kind == 0) opt = std::make_unique<SGD<double>>(params, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
    if (kind == 1) opt = std::make_unique<Adam<double>>(params, AdamOptions().weight_decay(0.1));
    if (kind == 2) opt = std::make_unique<AdamW<double>>(params);
    SCOPED_TRACE(opt->name());
    a.set_grad(Array<double>{1.0, 1.0, 1.0});
    opt->step();
    opt->step();
    EXPECT_GT(max_abs_diff(a.value(), Array<double>{1.0, -2.0, 0.5}), 1e-4);
    // b got no gradient: untouched (not even weight decay) and without state
    EXPECT_EQ(b.value(), (Array<double>{1.0, -2.0, 0.5}));
    EXPECT_TRUE(opt->state(b).empty());
    EXPECT_FALSE(opt->state(a).empty());
  }
}

TEST(Optimizer, ZeroGradForgetsByDefaultAndZeroesWithSetToNoneFalse) {
  auto a = make_param();
  Adam<double> opt({a}, AdamOptions(0.1));
  a.set_grad(Array<double>{1.0, -1.0, 1.0});
  opt.step();
  // PyTorch 2: zero_grad() forgets the gradient, so the next step skips a
  opt.zero_grad();
  EXPECT_FALSE(a.has_grad());
  const Array<double> after = a.value();
  opt.step();
  EXPECT_EQ(opt.state(a).step, 1);
  EXPECT_EQ(a.value(), after);
  // PyTorch 1.13's default, asked for: a zero gradient, and the next step still runs (momentum moves a)
  a.set_grad(Array<double>{1.0, -1.0, 1.0});
  opt.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(a.has_grad());
  EXPECT_EQ(a.grad(), (Array<double>{0.0, 0.0, 0.0}));
  const Array<double> before = a.value();
  opt.step();
  EXPECT_EQ(opt.state(a).step, 2);
  EXPECT_GT(max_abs_diff(a.value(), before), 1e-3);
}

// One default for the three zero_grads, PyTorch 2's set_to_none=true: Tensor::zero_grad() used to
// keep a zero gradient while Module's and Optimizer's forgot it.
TEST(Optimizer, TensorModuleAndOptimizerZeroGradAllForgetByDefault) {
  nn::Linear<double> layer(3, 2);
  T64 w = layer.weight, b = layer.bias;
  auto a = make_param();
  SGD<double> opt({a}, SGDOptions(0.1));
  const auto backward = [&] { sum(layer.forward(from_vector<double>({1, 2, 3}, {1, 3})) * sum(a * a)).backward(); };
  backward();
  ASSERT_TRUE(w.has_grad() && b.has_grad() && a.has_grad());
  w.zero_grad();
  EXPECT_FALSE(w.has_grad());
  EXPECT_TRUE(b.has_grad());
  layer.zero_grad();
  EXPECT_FALSE(b.has_grad());
  opt.zero_grad();
  EXPECT_FALSE(a.has_grad());
  backward();
  w.zero_grad(/*set_to_none=*/false);  // the zeros, asked for
  ASSERT_TRUE(w.has_grad());
  EXPECT_EQ(w.grad(), (Array<double>{{0, 0, 0}, {0, 0, 0}}));
}

// PyTorch 2's training loop: step, zero_grad(), then a step without a new gradient leaves every
// parameter and every optimizer's state as they were (with a zero gradient, momentum, weight decay
// and Adam's moments would still move them).
TEST(Optimizer, AStepAfterTheDefaultZeroGradChangesNothingInAnyOptimizer) {
  for (int kind = 0; kind < 5; ++kind) {
    auto a = make_param();
    const std::vector<T64> params = {a};
    std::unique_ptr<Optimizer<double>> opt;
    if (kind == 0) opt = std::make_unique<SGD<double>>(params, SGDOptions(0.1).momentum(0.9).weight_decay(0.1));
    if (kind == 1) opt = std::make_unique<Adam<double>>(params, AdamOptions(0.1).weight_decay(0.1).amsgrad(true));
    if (kind == 2) opt = std::make_unique<AdamW<double>>(params, AdamWOptions(0.1));
    if (kind == 3)
      opt =
          std::make_unique<RMSprop<double>>(params, RMSpropOptions(0.1).momentum(0.9).centered(true).weight_decay(0.1));
    if (kind == 4) opt = std::make_unique<Adagrad<double>>(params, AdagradOptions(0.1).weight_decay(0.1));
    SCOPED_TRACE(opt->name());
    a.set_grad(Array<double>{1.0, -1.0, 1.0});
    opt->step();
    opt->zero_grad();
    EXPECT_FALSE(a.has_grad());
    const Array<double> value = a.value();
    const ParamState<double> state = opt->state(a);
    ASSERT_FALSE(state.empty());
    opt->step();
    EXPECT_EQ(a.value(), value);
    const ParamState<double> now = opt->state(a);
    EXPECT_EQ(now.step, state.step);
    ASSERT_EQ(now.arrays().size(), state.arrays().size());
    for (const auto& [name, array] : state.arrays()) EXPECT_EQ(now.at(name), array) << name;
    EXPECT_FALSE(a.has_grad());
  }
}

TEST(Optimizer, TwoGroupsWithTheirOwnOptions) {
  auto a = make_param(), b = make_param(), c = make_param();
  SGD<double> opt({ParamGroup<double>({a}), ParamGroup<double>({b, c}, SGDOptions(0.5).momentum(0.9))},
                  SGDOptions(0.1));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_EQ(opt.param_groups()[0].options().get_lr(), 0.1);  // the defaults
  EXPECT_EQ(opt.param_groups()[1].options().get_lr(), 0.5);
  for (auto* p : {&a, &b, &c}) p->set_grad(Array<double>{1.0, 1.0, 1.0});
  opt.step();
  EXPECT_DOUBLE_EQ(a.value()(0), 1.0 - 0.1);
  EXPECT_DOUBLE_EQ(b.value()(0), 1.0 - 0.5);
  EXPECT_DOUBLE_EQ(c.value()(0), 1.0 - 0.5);
  EXPECT_FALSE(opt.state(a).has("momentum_buffer"));
  EXPECT_TRUE(opt.state(b).has("momentum_buffer"));
  // a group's lr is writable (as schedules do)
  opt.param_groups()[0].options().set_lr(0.25);
  opt.step();
  EXPECT_DOUBLE_EQ(a.value()(0), 1.0 - 0.1 - 0.25);
  EXPECT_EQ(static_cast<const SGDOptions&>(opt.param_groups()[1].options()).momentum(), 0.9);
  // add_param_group, and the flat parameter order
  auto d = make_param();
  opt.add_param_group(ParamGroup<double>({d}, SGDOptions(1.0)));
  const auto params = opt.parameters();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_TRUE(params[0].same(a) && params[1].same(b) && params[2].same(c) && params[3].same(d));
}

TEST(Optimizer, RejectsBadParameterLists) {
  auto a = make_param(), b = make_param();
  XGRAD_EXPECT_THROW_MSG(Adam<double>(std::vector<T64>{}), "Adam: optimizer got an empty parameter list");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({ParamGroup<double>({a}), ParamGroup<double>({b, a})}),
                         "some parameters appear in more than one parameter group");
  XGRAD_EXPECT_THROW_MSG(Adam<double>({a, b, a}), "appears twice");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({a * 2.0}, SGDOptions(0.1)), "can't optimize a non-leaf Tensor");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({T64()}, SGDOptions(0.1)), "undefined");
  XGRAD_EXPECT_THROW_MSG(SGD<double>({ParamGroup<double>({a}, AdamOptions())}, SGDOptions(0.1)),
                         "SGD: a parameter group has Adam options");
  Adam<double> opt({a});
  XGRAD_EXPECT_THROW_MSG(opt.add_param_group(ParamGroup<double>({a})), "more than one parameter group");
}

TEST(Optimizer, StateRoundTripContinuesIdentically) {
  // Optimizer 1 takes two steps; its state moves to optimizer 2 over copies of the parameters;
  // both then take the same steps and stay bitwise equal.
  auto a = make_param(), b = from_vector<double>({0.1, 0.2}, {2}, true);
  Adam<double> opt1({ParamGroup<double>({a}), ParamGroup<double>({b}, AdamOptions(0.05).amsgrad(true))},
                    AdamOptions(0.01));
  for (int s = 0; s < 2; ++s) {
    a.set_grad(arr(kGrads[s]));
    b.set_grad(Array<double>{0.3 * s - 0.1, 0.7});
    opt1.step();
  }
  auto a2 = T64(a.value(), true), b2 = T64(b.value(), true);
  Adam<double> opt2({ParamGroup<double>({a2}), ParamGroup<double>({b2}, AdamOptions(0.05).amsgrad(true))},
                    AdamOptions(0.01));
  const std::vector<ParamState<double>> saved = opt1.state();
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].step, 2);
  EXPECT_TRUE(saved[1].has("max_exp_avg_sq"));
  opt2.set_state(saved);
  for (int s = 2; s < 3; ++s) {
    a.set_grad(arr(kGrads[s]));
    b.set_grad(Array<double>{-0.4, 0.9});
    a2.set_grad(a.grad());
    b2.set_grad(b.grad());
    opt1.step();
    opt2.step();
  }
  EXPECT_EQ(a.value(), a2.value());
  EXPECT_EQ(b.value(), b2.value());
  EXPECT_EQ(opt2.state(a2).step, 3);
  // without the state, the same step differs (the moments and the bias correction restart)
  auto a3 = T64(a2.value(), true);
  Adam<double> fresh({a3}, AdamOptions(0.01));
  a3.set_grad(a2.grad());
  fresh.step();
  opt2.step();
  EXPECT_GT(max_abs_diff(a2.value(), a3.value()), 1e-6);
}

TEST(Optimizer, SetStateValidatesBeforeChangingAnything) {
  auto a = make_param();
  SGD<double> opt({a}, SGDOptions(0.1).momentum(0.9));
  a.set_grad(Array<double>{1.0, 1.0, 1.0});
  opt.step();
  ParamState<double> bad;
  bad.set("momentum_buffer", Array<double>{1.0, 2.0});
  XGRAD_EXPECT_THROW_MSG(opt.set_state({bad}), "SGD: state 'momentum_buffer' has shape (2)",
                         "its parameter has shape (3)");
  XGRAD_EXPECT_THROW_MSG(opt.set_state({ParamState<double>{}, ParamState<double>{}}),
                         "expected the state of 1 parameters, got 2");
  EXPECT_EQ(opt.state(a).at("momentum_buffer"), (Array<double>{1.0, 1.0, 1.0}));
  XGRAD_EXPECT_THROW_MSG(opt.state(make_param()), "not a parameter of this optimizer");
  // per parameter: clearing the state makes the next step a first momentum step again
  opt.set_state(a, ParamState<double>{});
  EXPECT_TRUE(opt.state(a).empty());
  a.set_grad(Array<double>{2.0, 2.0, 2.0});
  opt.step();
  EXPECT_EQ(opt.state(a).at("momentum_buffer"), (Array<double>{2.0, 2.0, 2.0}));
}

TEST(Optimizer, StepWithClosureReturnsItsLossAndUpdates) {
  // loss = sum(θ²): gradient 2θ, one SGD step with lr 0.25 halves θ
  auto a = make_param();
  SGD<double> opt({a}, SGDOptions(0.25));
  NoGradGuard no_grad;  // the closure runs with grad mode on regardless
  const T64 loss = opt.step([&] {
    opt.zero_grad();
    T64 l = sum(a * a);
    l.backward();
    return l;
  });
  EXPECT_DOUBLE_EQ(loss.item(), 1.0 + 4.0 + 0.25);
  EXPECT_EQ(a.value(), (Array<double>{0.5, -1.0, 0.25}));
  EXPECT_FALSE(is_grad_enabled());
}
