// optim::RMSprop (torch.optim.RMSprop, 1.13): the formula recomputed in long double over three
// steps for every option, torch's defaults and validation messages, the state it declares and
// creates, its options as named values, save/load round trips and an exact resume through a
// checkpoint. Parity with PyTorch over 5 steps is in test_optim_parity.cpp (optim_*_rmsprop*).
#include <cmath>

#include <xgrad/nn/nn.hpp>
#include "serialize_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {

using LD = long double;
using Vec = std::vector<LD>;

const std::vector<std::vector<double>> kGrads = {{0.5, -1.5, 2.0}, {0.25, 0.75, -3.0}, {-1.0, 0.5, 1e-3}};
const std::vector<double> kTheta0 = {1.0, -2.0, 0.5};

T64 make_param() { return from_vector<double>(kTheta0, {3}, true); }
Array<double> arr(const std::vector<double>& v) { return from_vector<double>(v, {v.size()}).value(); }

// The formula of torch's documentation, in long double.
struct RMSpropRef {
  RMSpropOptions o;
  Vec theta = Vec(kTheta0.begin(), kTheta0.end());
  Vec v = Vec(3, 0), gavg = Vec(3, 0), buf = Vec(3, 0);

  void step(const std::vector<double>& grad) {
    const LD alpha = o.alpha(), mu = o.momentum(), lr = o.lr();
    for (std::size_t i = 0; i < theta.size(); ++i) {
      LD g = o.maximize() ? -LD(grad[i]) : LD(grad[i]);
      g += LD(o.weight_decay()) * theta[i];
      v[i] = alpha * v[i] + (1 - alpha) * g * g;
      LD avg;
      if (o.centered()) {
        gavg[i] = alpha * gavg[i] + (1 - alpha) * g;
        avg = std::sqrt(v[i] - gavg[i] * gavg[i]) + LD(o.eps());
      } else {
        avg = std::sqrt(v[i]) + LD(o.eps());
      }
      if (mu > 0) {
        buf[i] = mu * buf[i] + g / avg;
        theta[i] -= lr * buf[i];
      } else {
        theta[i] -= lr * g / avg;
      }
    }
  }
};

struct Case {
  const char* name;
  RMSpropOptions options;
};

const std::vector<Case> kCases = {
    {"plain", RMSpropOptions()},
    {"alpha_eps", RMSpropOptions(0.05).alpha(0.5).eps(1e-3)},
    {"centered", RMSpropOptions(0.01).centered(true)},
    {"momentum", RMSpropOptions(0.01).momentum(0.9)},
    {"centered_momentum", RMSpropOptions(0.02).alpha(0.9).momentum(0.5).centered(true)},
    {"weight_decay", RMSpropOptions(0.01).weight_decay(0.1)},
    {"maximize", RMSpropOptions(0.01).momentum(0.9).weight_decay(0.1).maximize(true)},
};

}  // namespace

TEST(OptimRMSprop, FormulaOverThreeSteps) {
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    auto p = make_param();
    RMSprop<double> opt({p}, c.options);
    RMSpropRef ref{c.options};
    for (std::size_t s = 0; s < kGrads.size(); ++s) {
      p.set_grad(arr(kGrads[s]));
      opt.step();
      ref.step(kGrads[s]);
      for (std::size_t i = 0; i < 3; ++i) {
        const double want = static_cast<double>(ref.theta[i]);
        EXPECT_NEAR(p.value()(i), want, 1e-14 * std::max(1.0, std::abs(want))) << "step " << s + 1 << " element " << i;
      }
    }
  }
}

TEST(OptimRMSprop, EveryOptionChangesTheResult) {
  // Each case against plain (and centered against momentum): no option is silently ignored.
  std::vector<Array<double>> finals;
  for (const auto& c : kCases) {
    auto p = make_param();
    RMSprop<double> opt({p}, RMSpropOptions(c.options).lr(0.01));
    for (const auto& g : kGrads) {
      p.set_grad(arr(g));
      opt.step();
    }
    finals.push_back(p.value());
  }
  for (std::size_t i = 1; i < finals.size(); ++i)
    EXPECT_GT(max_abs_diff(finals[i], finals[0]), 1e-6) << kCases[i].name;
}

TEST(OptimRMSprop, FirstStepByHand) {
  // v = (1-α) g², avg = sqrt(v) + eps: θ1 = θ0 - lr g / (sqrt(0.01) |g| + eps) = θ0 - 0.1 sign(g)
  auto p = make_param();
  RMSprop<double> opt({p});
  p.set_grad(Array<double>{0.5, -1.5, 2.0});
  opt.step();
  EXPECT_NEAR(p.value()(0), 1.0 - 1e-2 * 0.5 / (std::sqrt(0.01 * 0.25) + 1e-8), 1e-15);
  EXPECT_NEAR(p.value()(1), -2.0 + 1e-2 * 1.5 / (std::sqrt(0.01 * 2.25) + 1e-8), 1e-15);
  EXPECT_NEAR(p.value()(2), 0.5 - 1e-2 * 2.0 / (std::sqrt(0.01 * 4.0) + 1e-8), 1e-15);
}

TEST(OptimRMSprop, DefaultsAreTorchs) {
  const RMSpropOptions o;
  EXPECT_EQ(o.lr(), 1e-2);
  EXPECT_EQ(o.alpha(), 0.99);
  EXPECT_EQ(o.eps(), 1e-8);
  EXPECT_EQ(o.weight_decay(), 0.0);
  EXPECT_EQ(o.momentum(), 0.0);
  EXPECT_FALSE(o.centered());
  EXPECT_FALSE(o.maximize());
  EXPECT_STREQ(o.optimizer_name(), "RMSprop");
  // torch's param_groups entries, in the constructor's order
  const OptionValues expected = {{"lr", 1e-2},        {"alpha", 0.99},   {"eps", 1e-8},      {"weight_decay", 0.0},
                                 {"momentum", 0.0},   {"centered", false}, {"maximize", false}};
  EXPECT_TRUE(o.values() == expected);
}

TEST(OptimRMSprop, ValidationWithPyTorchsMessages) {
  auto p = make_param();
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({p}, RMSpropOptions(-1)), "RMSprop: Invalid learning rate: -1");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({p}, RMSpropOptions().eps(-1e-3)), "Invalid epsilon value: -0.001");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({p}, RMSpropOptions().momentum(-0.5)), "Invalid momentum value: -0.5");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({p}, RMSpropOptions().weight_decay(-0.1)),
                         "Invalid weight_decay value: -0.1");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({p}, RMSpropOptions().alpha(-0.25)), "Invalid alpha value: -0.25");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({ParamGroup<double>({p}, RMSpropOptions(-2))}),
                         "RMSprop: Invalid learning rate: -2");
  XGRAD_EXPECT_THROW_MSG(RMSprop<double>({ParamGroup<double>({p}, AdamOptions())}),
                         "RMSprop: a parameter group has Adam options; expected RMSprop options");
  EXPECT_NO_THROW(RMSprop<double>({p}, RMSpropOptions(0).alpha(0).eps(0)));
}

TEST(OptimRMSprop, StateHoldsWhatTorchsDoes) {
  struct Expect {
    RMSpropOptions options;
    std::vector<std::string> arrays;
  };
  const std::vector<Expect> cases = {
      {RMSpropOptions(), {"square_avg"}},
      {RMSpropOptions().momentum(0.9), {"momentum_buffer", "square_avg"}},
      {RMSpropOptions().centered(true), {"grad_avg", "square_avg"}},
      {RMSpropOptions().momentum(0.9).centered(true), {"grad_avg", "momentum_buffer", "square_avg"}},
  };
  for (const auto& c : cases) {
    auto p = make_param(), q = make_param();
    RMSprop<double> opt({p, q}, c.options);
    EXPECT_EQ(opt.state_names(), (std::vector<std::string>{"step", "square_avg", "momentum_buffer", "grad_avg"}));
    for (int s = 0; s < 2; ++s) {
      p.set_grad(arr(kGrads[s]));
      opt.step();
    }
    const ParamState<double> state = opt.state(p);
    EXPECT_EQ(state.step, 2);
    std::vector<std::string> names;
    for (const auto& [name, array] : state.arrays()) names.push_back(name);
    EXPECT_EQ(names, c.arrays);
    EXPECT_TRUE(opt.state(q).empty()) << "no gradient, no state";
  }
  // v after one step of the default alpha: (1 - 0.99) g² (1 - 0.99 is 0.01 + 9e-18 in double)
  auto p = make_param();
  RMSprop<double> opt({p});
  p.set_grad(arr(kGrads[0]));
  opt.step();
  EXPECT_NEAR(opt.state(p).at("square_avg")(1), 0.01 * 2.25, 1e-16);
  // a state it does not declare is refused, naming what it holds
  ParamState<double> adam_state;
  adam_state.set("exp_avg", Array<double>{1.0, 2.0, 3.0});
  XGRAD_EXPECT_THROW_MSG(opt.set_state(p, adam_state), "RMSprop: state has an array 'exp_avg'",
                         "holds step, square_avg, momentum_buffer, grad_avg");
  EXPECT_EQ(opt.state(p).step, 1);
}

TEST(OptimRMSprop, OptionsAsNamedValues) {
  const RMSpropOptions o = RMSpropOptions(0.003).alpha(0.9).momentum(0.5).centered(true);
  RMSpropOptions copy;
  copy.set_values(o.values());
  EXPECT_TRUE(copy.values() == o.values());
  EXPECT_EQ(copy.get<double>("alpha"), 0.9);
  EXPECT_TRUE(copy.get<bool>("centered"));
  XGRAD_EXPECT_THROW_MSG(copy.get<bool>("alpha"), "RMSprop: option 'alpha' is a number");
  XGRAD_EXPECT_THROW_MSG(copy.get<double>("betas"), "RMSprop: no option 'betas'");

  OptionValues unknown = o.values();
  unknown.emplace_back("nesterov", true);
  XGRAD_EXPECT_THROW_MSG(copy.set_values(unknown), "RMSprop: unknown option 'nesterov'",
                         "(RMSprop has lr, alpha, eps, weight_decay, momentum, centered, maximize)");
  OptionValues missing = o.values();
  missing.pop_back();
  XGRAD_EXPECT_THROW_MSG(copy.set_values(missing), "RMSprop: option 'maximize' is missing");
  OptionValues wrong_kind = o.values();
  wrong_kind[5].second = 1.0;
  XGRAD_EXPECT_THROW_MSG(copy.set_values(wrong_kind), "RMSprop: option 'centered' should be a bool, got a number");
  EXPECT_TRUE(copy.values() == o.values()) << "a failed set_values changes nothing";
}

// ---- save, load and resume -------------------------------------------------------------------------

namespace {

// A small MLP trained with RMSprop (centered, momentum, weight decay) in two parameter groups.
struct RMSpropRun {
  std::shared_ptr<nn::Sequential<float>> model;
  std::unique_ptr<RMSprop<float>> optimizer;
  std::unique_ptr<StepLR<float>> scheduler;
  Tensor<float> x, y;
  std::vector<float> losses;

  explicit RMSpropRun(std::uint64_t seed) {
    manual_seed(seed);
    model = std::make_shared<nn::Sequential<float>>();
    model->push_back(std::make_shared<nn::Linear<float>>(4, 8));
    model->push_back(std::make_shared<nn::GELU<float>>());
    model->push_back(std::make_shared<nn::Linear<float>>(8, 2));
    const auto named = model->named_parameters();
    std::vector<Tensor<float>> first, rest;
    for (const auto& [name, p] : named) (name.rfind("0.", 0) == 0 ? first : rest).push_back(p);
    optimizer = std::make_unique<RMSprop<float>>(
        std::vector<ParamGroup<float>>{ParamGroup<float>(first),
                                       ParamGroup<float>(rest, RMSpropOptions(3e-3).momentum(0.5).centered(true))},
        RMSpropOptions(1e-2).alpha(0.9).momentum(0.9).weight_decay(1e-3));
    scheduler = std::make_unique<StepLR<float>>(*optimizer, 2, 0.5);
    Generator data(7);
    x = randn<float>({6, 4}, data);
    y = randn<float>({6, 2}, data);
  }

  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      optimizer->zero_grad();
      Tensor<float> loss = mse_loss(model->forward(x), y);
      loss.backward();
      optimizer->step();
      scheduler->step();
      losses.push_back(loss.item());
    }
  }
};

}  // namespace

TEST(OptimRMSprop, SaveLoadRoundTripContinuesIdentically) {
  TempDir dir;
  for (const char* file : {"rmsprop.xgrad", "rmsprop.json"}) {
    SCOPED_TRACE(file);
    RMSpropRun a(1);
    a.train(3);
    const std::string path = dir.file(file);
    save(*a.optimizer, path, parameter_names(*a.optimizer, *a.model));

    // The file alone: every option by name, every state array.
    const OptimizerState<float> state = load_optimizer_state<float>(path);
    EXPECT_EQ(state.optimizer, "RMSprop");
    ASSERT_EQ(state.param_groups.size(), 2u);
    EXPECT_TRUE(state.param_groups[1].options->values() == a.optimizer->param_groups()[1].options().values());
    EXPECT_TRUE(state.param_groups[1].options->get<bool>("centered"));
    EXPECT_EQ(state.param_groups[0].options->get<double>("alpha"), 0.9);
    ASSERT_EQ(state.state.size(), 4u);
    const auto names = parameter_names(*a.optimizer, *a.model);
    for (std::size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(state.state[i].first, names[i]);
      expect_same_param_state(a.optimizer->state()[i], state.state[i].second, names[i]);
    }
    EXPECT_TRUE(state.state[3].second.has("grad_avg"));

    RMSpropRun b(2);  // other initial values, fresh optimizer
    b.model->load_state_dict(a.model->state_dict());
    load(*b.optimizer, path, parameter_names(*b.optimizer, *b.model));
    expect_same_optimizer_state(*a.optimizer, *b.optimizer);
    const auto& restored = dynamic_cast<const RMSpropOptions&>(b.optimizer->param_groups()[1].options());
    EXPECT_TRUE(restored.centered());
    EXPECT_EQ(restored.momentum(), 0.5);
    b.scheduler->load_state(a.scheduler->state());
    a.train(3);
    b.train(3);
    expect_same_state_dict(a.model->state_dict(), b.model->state_dict());
    EXPECT_EQ(std::vector<float>(a.losses.end() - 3, a.losses.end()), b.losses);
  }
}

TEST(OptimRMSprop, ResumingFromACheckpointIsExact) {
  constexpr int N = 4, M = 5;
  RMSpropRun uninterrupted(11);
  uninterrupted.train(N + M);
  TempDir dir;
  for (const char* file : {"run.ckpt", "run.json"}) {
    SCOPED_TRACE(file);
    const std::string path = dir.file(file);
    {
      RMSpropRun first(11);
      first.train(N);
      save_checkpoint(path, *first.model, *first.optimizer, first.scheduler.get(), default_generator(), N);
    }
    RMSpropRun resumed(12345);
    const auto c = load_checkpoint(path, *resumed.model, *resumed.optimizer, resumed.scheduler.get(),
                                   default_generator());
    ASSERT_EQ(c.step, N);
    resumed.train(M);
    expect_same_state_dict(uninterrupted.model->state_dict(), resumed.model->state_dict());  // bit for bit
    EXPECT_EQ(std::vector<float>(uninterrupted.losses.begin() + N, uninterrupted.losses.end()), resumed.losses);
    expect_same_optimizer_state(*uninterrupted.optimizer, *resumed.optimizer);
  }
  // Without the optimizer state (square averages, buffers) the same M steps differ: the check
  // above is not vacuous.
  RMSpropRun first(11);
  first.train(N);
  RMSpropRun fresh(12345);
  fresh.model->load_state_dict(first.model->state_dict());
  fresh.scheduler->load_state(first.scheduler->state());
  for (std::size_t g = 0; g < 2; ++g)
    fresh.optimizer->param_groups()[g].options().set_lr(first.optimizer->param_groups()[g].options().get_lr());
  fresh.train(M);
  EXPECT_NE(std::vector<float>(uninterrupted.losses.begin() + N, uninterrupted.losses.end()), fresh.losses);
}

TEST(OptimRMSprop, LoadingAnotherOptimizersStateSaysWhatDiffers) {
  TempDir dir;
  RMSpropRun a(1);
  a.train(2);
  const auto names = parameter_names(*a.optimizer, *a.model);
  const std::string path = dir.file("rmsprop.xgrad");
  save(*a.optimizer, path, names);

  // An Adam over the same parameters: the kind differs.
  optim::Adam<float> adam(a.model->parameters());
  expect_error<std::invalid_argument>([&] { load(adam, path, names); },
                                      {"the state is of a RMSprop optimizer, this optimizer is Adam"});
  // A state whose options lack one RMSprop declares, or have one it does not.
  RMSpropRun b(2);
  const auto before = b.optimizer->state();
  OptimizerState<float> edited = load_optimizer_state<float>(path);
  OptionValues values = edited.param_groups[0].options->values();
  values.erase(values.begin() + 5);  // centered
  edited.param_groups[0].options = std::make_shared<SavedOptions>("RMSprop", values);
  expect_error<std::invalid_argument>([&] { load_optimizer_state_dict(*b.optimizer, edited, names); },
                                      {"the options of parameter group 0 of the state",
                                       "RMSprop: option 'centered' is missing"});
  values = edited.param_groups[1].options->values();
  values.emplace_back("nesterov", false);
  edited = load_optimizer_state<float>(path);
  edited.param_groups[1].options = std::make_shared<SavedOptions>("RMSprop", values);
  expect_error<std::invalid_argument>([&] { load_optimizer_state_dict(*b.optimizer, edited, names); },
                                      {"parameter group 1", "RMSprop: unknown option 'nesterov'"});
  // A state array RMSprop does not declare.
  edited = load_optimizer_state<float>(path);
  edited.state[0].second.set("exp_avg", edited.state[0].second.at("square_avg"));
  expect_error<std::invalid_argument>([&] { load_optimizer_state_dict(*b.optimizer, edited, names); },
                                      {"RMSprop: state has an array 'exp_avg'"});
  // Nothing changed.
  const auto after = b.optimizer->state();
  for (std::size_t i = 0; i < before.size(); ++i) expect_same_param_state(before[i], after[i], names[i]);
  EXPECT_EQ(b.optimizer->param_groups()[0].options().get_lr(), 1e-2);
  // Saved options cannot stand in for the optimizer's own.
  const ParamGroup<float> saved({zeros<float>({1}, true)}, *edited.param_groups[0].options);
  XGRAD_EXPECT_THROW_MSG(b.optimizer->add_param_group(saved), "a parameter group has options of another type");
  b.optimizer->param_groups()[0].set_options(*edited.param_groups[0].options);
  XGRAD_EXPECT_THROW_MSG(b.optimizer->step(), "RMSprop: a parameter group's options were replaced by options of "
                                              "another type (RMSprop)");
}
