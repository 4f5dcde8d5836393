// Learning-rate schedules: sequences against their closed forms (recomputed here in long double),
// the initial step at construction, groups, state save/restore, and validation.
#include "test_util.hpp"

#include <cmath>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::optim;

namespace {

using LD = long double;
const LD kPi = 3.141592653589793238462643383279502884L;

T64 scalar_param() { return zeros<double>({1}, true); }

// The lr of group 0 before each of n scheduler steps (PyTorch's loop: read, optimizer.step(),
// scheduler.step()).
std::vector<double> run(Optimizer<double>& opt, LRScheduler<double>& sched, int n) {
  std::vector<double> lrs;
  for (int i = 0; i < n; ++i) {
    lrs.push_back(opt.param_groups()[0].options().get_lr());
    EXPECT_EQ(sched.get_last_lr()[0], lrs.back());
    opt.step();
    sched.step();
  }
  return lrs;
}

void expect_sequence(const std::vector<double>& got, const std::vector<LD>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(std::abs(got[i] - static_cast<double>(want[i])), tol * std::max<double>(1.0, std::abs(double(want[i]))))
        << "epoch " << i << ": got " << got[i] << ", want " << static_cast<double>(want[i]);
}

LD cosine(LD base, LD eta_min, int T_max, int t) {
  return eta_min + (base - eta_min) * (1 + std::cos(kPi * t / T_max)) / 2;
}

}  // namespace

TEST(LRScheduler, StepLRHalvesEveryThreeEpochs) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(0.8));
  StepLR<double> sched(opt, 3, 0.5);
  const auto lrs = run(opt, sched, 10);
  EXPECT_EQ(lrs, (std::vector<double>{0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2, 0.2, 0.1}));
  EXPECT_EQ(sched.last_epoch(), 10);
}

TEST(LRScheduler, CosineFollowsTheClosedFormAlsoBeyondTMax) {
  // PyTorch's recursive form rises again after T_max; it stays on the closed-form cosine
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(1.0));
  CosineAnnealingLR<double> sched(opt, 10, 0.1);
  const auto lrs = run(opt, sched, 45);
  std::vector<LD> want;
  for (int t = 0; t < 45; ++t) want.push_back(cosine(1.0L, 0.1L, 10, t));
  expect_sequence(lrs, want, 1e-13);
  EXPECT_NEAR(lrs[10], 0.1, 1e-15);  // the minimum at T_max
  EXPECT_NEAR(lrs[20], 1.0, 1e-13);  // back at the top at 2 T_max
}

TEST(LRScheduler, LinearWarmup) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(0.4));
  LinearLR<double> sched(opt, 0.25, 1.0, 4);
  // factors 0.25 + 0.75 e / 4, then 1
  expect_sequence(run(opt, sched, 7), {0.1L, 0.175L, 0.25L, 0.325L, 0.4L, 0.4L, 0.4L}, 1e-15);
  // defaults: start 1/3, end 1, 5 iterations
  auto q = scalar_param();
  SGD<double> opt2({q}, SGDOptions(0.3));
  LinearLR<double> sched2(opt2);
  std::vector<LD> want;
  for (int e = 0; e < 7; ++e) want.push_back(0.3L * (1.0L / 3 + (1 - 1.0L / 3) * std::min(e, 5) / 5));
  expect_sequence(run(opt2, sched2, 7), want, 1e-15);
}

TEST(LRScheduler, LambdaPerGroup) {
  auto a = scalar_param(), b = scalar_param();
  SGD<double> opt({ParamGroup<double>({a}), ParamGroup<double>({b}, SGDOptions(2.0))}, SGDOptions(1.0));
  LambdaLR<double> sched(opt, std::vector<LambdaLR<double>::Lambda>{[](int e) { return std::pow(0.9, e); },
                                                                     [](int e) { return 1.0 / (e + 1); }});
  for (int e = 0; e < 6; ++e) {
    EXPECT_DOUBLE_EQ(sched.get_last_lr()[0], std::pow(0.9, e));
    EXPECT_DOUBLE_EQ(sched.get_last_lr()[1], 2.0 / (e + 1));
    EXPECT_EQ(opt.param_groups()[1].options().get_lr(), sched.get_last_lr()[1]);
    sched.step();
  }
  EXPECT_EQ(sched.base_lrs(), (std::vector<double>{1.0, 2.0}));
  XGRAD_EXPECT_THROW_MSG(LambdaLR<double>(opt, std::vector<LambdaLR<double>::Lambda>{[](int) { return 1.0; }}),
                         "LambdaLR: expected 2 lr_lambdas, but got 1");
}

TEST(LRScheduler, ConstructionSetsTheEpochZeroLr) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(0.5));
  LinearLR<double> warm(opt, 0.1, 1.0, 10);
  EXPECT_DOUBLE_EQ(opt.param_groups()[0].options().get_lr(), 0.05);
  EXPECT_EQ(warm.last_epoch(), 0);
  EXPECT_EQ(opt.param_groups()[0].initial_lr, 0.5);
  // the optimizer's step uses the scheduled lr: θ = 0 - 0.05 * 1
  p.set_grad(Array<double>{1.0});
  opt.step();
  EXPECT_DOUBLE_EQ(p.value()(0), -0.05);
}

TEST(LRScheduler, SequentialWarmupThenCosine) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(0.1));
  auto warm = std::make_shared<LinearLR<double>>(opt, 0.1, 1.0, 5);
  auto cos = std::make_shared<CosineAnnealingLR<double>>(opt, 20);
  SequentialLR<double> sched(opt, {warm, cos}, {5});
  const auto lrs = run(opt, sched, 30);
  std::vector<LD> want;
  for (int e = 0; e < 30; ++e) want.push_back(e < 5 ? 0.1L * (0.1L + 0.9L * e / 5) : cosine(0.1L, 0.0L, 20, e - 5));
  expect_sequence(lrs, want, 1e-13);
}

TEST(LRScheduler, StateRestoresAnInterruptedRun) {
  // Run A: 30 steps. Run B: 12 steps, save, rebuild everything, load, 18 more steps.
  auto make = [](T64& p, std::unique_ptr<SGD<double>>& opt, std::unique_ptr<SequentialLR<double>>& sched) {
    p = scalar_param();
    opt = std::make_unique<SGD<double>>(std::vector<T64>{p}, SGDOptions(0.2));
    auto warm = std::make_shared<LinearLR<double>>(*opt, 0.2, 1.0, 4);
    auto cos = std::make_shared<CosineAnnealingLR<double>>(*opt, 10, 0.01);
    sched = std::make_unique<SequentialLR<double>>(*opt, std::vector<std::shared_ptr<LRScheduler<double>>>{warm, cos},
                                                   std::vector<int>{4});
  };
  T64 pa, pb, pc;
  std::unique_ptr<SGD<double>> oa, ob, oc;
  std::unique_ptr<SequentialLR<double>> sa, sb, sc;
  make(pa, oa, sa);
  const auto full = run(*oa, *sa, 30);
  make(pb, ob, sb);
  auto first = run(*ob, *sb, 12);
  const LRSchedulerState saved = sb->state();
  const double saved_lr = ob->param_groups()[0].options().get_lr();
  ASSERT_EQ(saved.schedulers.size(), 2u);
  EXPECT_EQ(saved.last_epoch, 12);
  make(pc, oc, sc);
  sc->load_state(saved);
  oc->param_groups()[0].options().set_lr(saved_lr);  // the optimizer's own state
  const auto rest = run(*oc, *sc, 18);
  first.insert(first.end(), rest.begin(), rest.end());
  EXPECT_EQ(first, full);
  // a state of the wrong structure is refused
  LRSchedulerState wrong = saved;
  wrong.schedulers.pop_back();
  XGRAD_EXPECT_THROW_MSG(sc->load_state(wrong), "SequentialLR: the state holds 1 schedules");
  XGRAD_EXPECT_THROW_MSG(sc->load_state(saved.schedulers[0]), "SequentialLR: the state holds 0 schedules");
  StepLR<double> step(*oc, 2);
  LRSchedulerState two_groups = step.state();
  two_groups.base_lrs.push_back(1.0);
  XGRAD_EXPECT_THROW_MSG(step.load_state(two_groups),
                         "StepLR: the state is for 2 parameter groups, the optimizer has 1");
}

TEST(LRScheduler, ResumingWithLastEpochUsesTheClosedForm) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(1.0));
  XGRAD_EXPECT_THROW_MSG(CosineAnnealingLR<double>(opt, 10, 0.0, 4),
                         "CosineAnnealingLR: param 'initial_lr' is not specified in param_groups[0]");
  opt.param_groups()[0].initial_lr = 1.0;
  opt.param_groups()[0].options().set_lr(0.123);  // whatever the lr was, resuming recomputes it
  CosineAnnealingLR<double> sched(opt, 10, 0.0, 4);
  EXPECT_EQ(sched.last_epoch(), 5);
  EXPECT_NEAR(sched.get_last_lr()[0], double(cosine(1.0L, 0.0L, 10, 5)), 1e-15);
  sched.step();
  EXPECT_NEAR(sched.get_last_lr()[0], double(cosine(1.0L, 0.0L, 10, 6)), 1e-15);
}

TEST(LRScheduler, Validation) {
  auto p = scalar_param();
  SGD<double> opt({p}, SGDOptions(1.0));
  XGRAD_EXPECT_THROW_MSG(StepLR<double>(opt, 0), "StepLR: step_size must be positive, got 0");
  XGRAD_EXPECT_THROW_MSG(CosineAnnealingLR<double>(opt, 0), "CosineAnnealingLR: T_max must be positive");
  XGRAD_EXPECT_THROW_MSG(LinearLR<double>(opt, 1.5), "LinearLR: starting multiplicative factor");
  XGRAD_EXPECT_THROW_MSG(LinearLR<double>(opt, 0.5, -0.1), "LinearLR: ending multiplicative factor");
  XGRAD_EXPECT_THROW_MSG(LinearLR<double>(opt, 0.5, 1.0, 0), "LinearLR: total_iters must be positive");
  auto a = std::make_shared<StepLR<double>>(opt, 2);
  auto b = std::make_shared<StepLR<double>>(opt, 3);
  XGRAD_EXPECT_THROW_MSG(SequentialLR<double>(opt, {a, b}, {}),
                         "one more than the number of milestone points, but got number of schedulers 2");
  auto q = scalar_param();
  SGD<double> other({q}, SGDOptions(1.0));
  auto c = std::make_shared<StepLR<double>>(other, 2);
  XGRAD_EXPECT_THROW_MSG(SequentialLR<double>(opt, {a, c}, {3}), "same optimizer", "index 1");
  XGRAD_EXPECT_THROW_MSG(SequentialLR<double>(opt, {}, {}), "at least one scheduler");
}
