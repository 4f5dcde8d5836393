// fixture_checkpoint(): what the committed checkpoint fixtures (tests/fixtures/serialize_v*/) hold,
// value by value, and the model, optimizer and schedule they restore into. Shared by
// test_checkpoint.cpp, which loads the fixtures, and write_checkpoint_fixtures.cpp, which writes
// them for a new layout (scripts/make_checkpoint_fixtures.sh).
#pragma once

#include <limits>
#include <memory>
#include <vector>

#include <xgrad/nn/nn.hpp>
#include <xgrad/optim/optim.hpp>
#include <xgrad/serialize/checkpoint.hpp>

namespace xgrad::testing {

// A module with a parameter and a buffer of special values.
class FixtureNet : public nn::Module<float> {
 public:
  FixtureNet() : Module("FixtureNet") {
    weight = register_parameter("weight", zeros<float>({2, 3}));
    bias = register_parameter("bias", zeros<float>({2}));
    register_buffer("running", zeros<float>({4}));
  }
  Tensor<float> weight, bias;
};

inline std::unique_ptr<optim::Adam<float>> fixture_optimizer(FixtureNet& net) {
  return std::make_unique<optim::Adam<float>>(
      std::vector<optim::ParamGroup<float>>{optim::ParamGroup<float>({net.weight}),
                                            optim::ParamGroup<float>({net.bias}, optim::AdamOptions(0.5))},
      optim::AdamOptions(0.5));
}

inline std::unique_ptr<optim::SequentialLR<float>> fixture_schedule(optim::Optimizer<float>& opt) {
  auto warmup = std::make_shared<optim::LinearLR<float>>(opt, 0.25, 1.0, 2);
  auto cosine = std::make_shared<optim::CosineAnnealingLR<float>>(opt, 8);
  return std::make_unique<optim::SequentialLR<float>>(
      opt, std::vector<std::shared_ptr<optim::LRScheduler<float>>>{warmup, cosine}, std::vector<int>{2});
}

// What the fixtures hold, value by value.
inline Checkpoint<float> fixture_checkpoint() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  Checkpoint<float> c;
  c.model.insert("weight", Array<float>{{0.5f, -1.25f, 2.0f}, {1e-3f, -0.0f, 3.0e38f}});
  c.model.insert("bias", Array<float>{0.125f, -7.5f});
  c.model.insert("running", Array<float>{inf, -inf, std::numeric_limits<float>::quiet_NaN(), 1e-45f});

  c.optimizer.optimizer = "Adam";
  auto o0 = std::make_shared<optim::AdamOptions>(0.0025);
  o0->betas({0.8, 0.99}).eps(1e-6).weight_decay(0.01).amsgrad(true);
  auto o1 = std::make_shared<optim::AdamOptions>(0.005);
  o1->maximize(true);
  c.optimizer.param_groups = {{o0, 0.01, {"weight"}}, {o1, 0.02, {"bias"}}};
  optim::ParamState<float> w;
  w.step = 3;
  w.set("exp_avg", Array<float>{{0.1f, 0.2f, 0.3f}, {-0.1f, -0.2f, -0.3f}});
  w.set("exp_avg_sq", Array<float>{{1e-4f, 2e-4f, 3e-4f}, {4e-4f, 5e-4f, 6e-4f}});
  w.set("max_exp_avg_sq", Array<float>{{2e-4f, 2e-4f, 3e-4f}, {4e-4f, 6e-4f, 6e-4f}});
  optim::ParamState<float> b;
  b.step = 3;
  b.set("exp_avg", Array<float>{0.5f, -0.5f});
  b.set("exp_avg_sq", Array<float>{0.25f, 0.0625f});
  c.optimizer.state = {{"weight", w}, {"bias", b}};

  optim::LRSchedulerState warmup{2, 3, {0.01, 0.02}, {0.01, 0.02}, {}};
  optim::LRSchedulerState cosine{1, 2, {0.01, 0.02}, {0.0025, 0.005}, {}};
  c.scheduler = optim::LRSchedulerState{3, 4, {0.01, 0.02}, {0.0025, 0.005}, {warmup, cosine}};
  c.generator = GeneratorState{42, {1, 2, 3, 0xFFFFFFFFFFFFFFFFull}};
  c.step = 3;
  c.metadata = {{"note", "fixture v1"}, {"unicode", "\xC3\xBC\xE2\x86\x92"}};
  return c;
}

inline const char* const kFixtureNames[] = {"checkpoint.bin", "checkpoint.json"};

}  // namespace xgrad::testing
