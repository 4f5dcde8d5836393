// optim::Adagrad (torch.optim.Adagrad, 1.13): three steps against torch's own values with every
// numeric option set, lr_decay's schedule, maximize, torch's defaults and validation messages,
// the state it creates, and an exact resume through save and load.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include <xgrad/serialize/archive.hpp>
#include <xgrad/xgrad.hpp>
#include "test_util.hpp"

using namespace xgrad;
using namespace xgrad::optim;
using xgrad::testing::error_of;

namespace {

const std::vector<double> kW0 = {0.5, -1.0, 2.0, 0.25, 0.0, -3.0};

// loss = sum(w^3) + sum(w * [1, 2, 3]) for w (2, 3): dloss/dw = 3 w^2 + [1, 2, 3].
void backward_step(Tensor<double>& w) {
  w.zero_grad(true);
  (sum(w * w * w) + sum(w * from_vector<double>({1, 2, 3}, {3}))).backward();
}

AdagradOptions every_option() {
  return AdagradOptions(0.1).lr_decay(0.01).weight_decay(0.1).initial_accumulator_value(0.2).eps(1e-10);
}

}  // namespace

TEST(Adagrad, ThreeStepsMatchTorch) {
  // torch.optim.Adagrad([w], lr=0.1, lr_decay=0.01, weight_decay=0.1, initial_accumulator_value=0.2,
  // eps=1e-10), float64, the same loss.
  const std::vector<std::vector<double>> expected = {
      {0.40295050412213795, -1.0995860909367592, 1.9000432544687045, 0.15617832207276333, -0.09759000729009142,
       -3.099988665215441},
      {0.3400096128339992, -1.173479910084658, 1.8329290610186337, 0.09238529500373252, -0.167072398381824,
       -3.1720446675815577},
      {0.29115932655249205, -1.235348066934584, 1.7800109618114615, 0.04118526099014322, -0.22428028778104933,
       -3.231312278768295}};
  const std::vector<double> sum = {7.6796234717834535, 90.8167093985755, 603.6997595451965,
                                   3.9265274879213123, 12.548226226858903, 2956.1187452411714};
  Tensor<double> w = from_vector<double>(kW0, {2, 3}, true);
  Adagrad<double> opt({w}, every_option());
  for (const auto& values : expected) {
    backward_step(w);
    opt.step();
    for (std::size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(w.value().data()[i], values[i], 1e-13) << i;
  }
  EXPECT_EQ(opt.state(w).step, 3);
  for (std::size_t i = 0; i < sum.size(); ++i) EXPECT_NEAR(opt.state(w).at("sum").data()[i], sum[i], 1e-10) << i;
}

TEST(Adagrad, MaximizeAscends) {
  Tensor<double> a = from_vector<double>({1.0, -2.0}, {2}, true), b = from_vector<double>({1.0, -2.0}, {2}, true);
  Adagrad<double> down({a}, AdagradOptions(0.5)), up({b}, AdagradOptions(0.5).maximize(true));
  sum(a * a).backward();
  sum(b * b).backward();
  down.step();
  up.step();
  // The first step moves each entry by lr in the gradient's direction (g / sqrt(g^2)).
  EXPECT_NEAR(a.value()(0), 0.5, 1e-9);
  EXPECT_NEAR(a.value()(1), -1.5, 1e-9);
  EXPECT_NEAR(b.value()(0), 1.5, 1e-9);
  EXPECT_NEAR(b.value()(1), -2.5, 1e-9);
}

TEST(Adagrad, DefaultsStateAndValidationAsTorch) {
  const AdagradOptions o;
  EXPECT_EQ(o.lr(), 1e-2);
  EXPECT_EQ(o.lr_decay(), 0.0);
  EXPECT_EQ(o.weight_decay(), 0.0);
  EXPECT_EQ(o.initial_accumulator_value(), 0.0);
  EXPECT_EQ(o.eps(), 1e-10);
  EXPECT_FALSE(o.maximize());
  Tensor<double> w = from_vector<double>({1.0}, {1}, true);
  EXPECT_EQ(error_of([&] { Adagrad<double>({w}, AdagradOptions(-1)); }), "Adagrad: Invalid learning rate: -1");
  EXPECT_EQ(error_of([&] { Adagrad<double>({w}, AdagradOptions().lr_decay(-0.5)); }),
            "Adagrad: Invalid lr_decay value: -0.5");
  EXPECT_EQ(error_of([&] { Adagrad<double>({w}, AdagradOptions().initial_accumulator_value(-1)); }),
            "Adagrad: Invalid initial_accumulator_value value: -1");
  Adagrad<double> opt({w});
  EXPECT_EQ(opt.state_names(), (std::vector<std::string>{"step", "sum"}));
}

TEST(Adagrad, SaveAndLoadResumesExactly) {
  Tensor<double> w = from_vector<double>(kW0, {2, 3}, true), v = from_vector<double>(kW0, {2, 3}, true);
  Adagrad<double> straight({w}, every_option());
  for (int i = 0; i < 4; ++i) {
    backward_step(w);
    straight.step();
  }
  Adagrad<double> first({v}, every_option());
  for (int i = 0; i < 2; ++i) {
    backward_step(v);
    first.step();
  }
  const std::string path = (std::filesystem::temp_directory_path() / "xgrad_adagrad_resume").string();
  save(first, path, {"v"});
  Adagrad<double> second({v}, AdagradOptions());
  load(second, path, {"v"});
  std::remove(path.c_str());
  for (int i = 0; i < 2; ++i) {
    backward_step(v);
    second.step();
  }
  for (std::size_t i = 0; i < kW0.size(); ++i) EXPECT_EQ(v.value().data()[i], w.value().data()[i]) << i;
}
