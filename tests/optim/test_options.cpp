// Every option an optimizer declares (XGRAD_OPTION) is saved and restored: each is set to a value
// other than its default, the optimizer is saved to a file and loaded into a fresh one built
// with the defaults, and every option must come back. Also: the options carry torch's names in
// torch's order, and the shared Adam/AdamW declarations keep their own defaults and setters.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>
#include <xgrad/serialize/archive.hpp>

namespace {

using namespace xgrad;
using optim::OptionValue;
using optim::OptionValues;

std::vector<std::string> names_of(const OptionValues& values) {
  std::vector<std::string> names;
  for (const auto& [name, value] : values) names.push_back(name);
  return names;
}

// Each value moved off its default, still valid for every optimizer (numbers stay in [0, 1)).
// `keep` names one option left as it is (SGD's nesterov excludes a dampening).
OptionValues changed(const OptionValues& values, const std::string& keep) {
  OptionValues out = values;
  for (auto& [name, value] : out) {
    if (name == keep) continue;
    if (auto* x = std::get_if<double>(&value)) *x = *x == 0.0 ? 0.125 : *x * 0.5;
    else if (auto* b = std::get_if<bool>(&value)) *b = !*b;
    else for (double& t : std::get<std::vector<double>>(value)) t *= 0.5;
  }
  return out;
}

template <class Opt, class Options>
void check_round_trip(const Options& defaults, const std::vector<std::string>& torch_names,
                      const std::string& keep = "") {
  SCOPED_TRACE(defaults.optimizer_name());
  EXPECT_EQ(names_of(defaults.values()), torch_names);

  Options options = defaults;
  const OptionValues set = changed(defaults.values(), keep);
  options.set_values(set);
  ASSERT_EQ(options.values(), set);
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (set[i].first != keep) {
      EXPECT_NE(set[i].second, defaults.values()[i].second) << set[i].first << " was not moved off its default";
    }
  }

  Tensor<double> w(xt::xarray<double>{1.0, 2.0}, true);
  Opt saved({w}, options);
  const std::string path =
      (std::filesystem::temp_directory_path() / (std::string("xgrad_options_") + defaults.optimizer_name())).string();
  save(saved, path, {"w"});

  Tensor<double> fresh_w(xt::xarray<double>{1.0, 2.0}, true);
  Opt loaded({fresh_w}, defaults);
  ASSERT_EQ(loaded.param_groups()[0].options().values(), defaults.values());
  load(loaded, path, {"w"});
  std::remove(path.c_str());
  EXPECT_EQ(loaded.param_groups()[0].options().values(), set);
}

TEST(OptimOptions, EveryDeclaredSGDOptionIsSavedAndRestored) {
  const std::vector<std::string> names{"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"};
  check_round_trip<optim::SGD<double>>(optim::SGDOptions(0.1), names, "nesterov");
  check_round_trip<optim::SGD<double>>(optim::SGDOptions(0.1), names, "dampening");
}

TEST(OptimOptions, EveryDeclaredAdamOptionIsSavedAndRestored) {
  check_round_trip<optim::Adam<double>>(optim::AdamOptions(),
                                        {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"});
}

TEST(OptimOptions, EveryDeclaredAdamWOptionIsSavedAndRestored) {
  check_round_trip<optim::AdamW<double>>(optim::AdamWOptions(),
                                         {"lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"});
}

TEST(OptimOptions, EveryDeclaredRMSpropOptionIsSavedAndRestored) {
  check_round_trip<optim::RMSprop<double>>(
      optim::RMSpropOptions(), {"lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"});
}

TEST(OptimOptions, EveryDeclaredAdagradOptionIsSavedAndRestored) {
  check_round_trip<optim::Adagrad<double>>(
      optim::AdagradOptions(), {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps", "maximize"});
}

// Adam and AdamW share one declaration of their options; each keeps torch's defaults, its name,
// and setters that return its own type (so a chain can be given to its optimizer).
TEST(OptimOptions, AdamAndAdamWShareDeclarationsButNotDefaults) {
  EXPECT_EQ(optim::AdamOptions().weight_decay(), 0.0);
  EXPECT_EQ(optim::AdamWOptions().weight_decay(), 1e-2);
  EXPECT_EQ(optim::AdamWOptions(0.5).lr(), 0.5);
  EXPECT_STREQ(optim::AdamOptions().optimizer_name(), "Adam");
  EXPECT_STREQ(optim::AdamWOptions().optimizer_name(), "AdamW");
  static_assert(std::is_same_v<decltype(optim::AdamWOptions().lr(0.1)), optim::AdamWOptions&>);
  static_assert(std::is_same_v<decltype(optim::AdamOptions().eps(0.1)), optim::AdamOptions&>);
  Tensor<double> w(xt::xarray<double>{1.0}, true);
  optim::AdamW<double> opt({w}, optim::AdamWOptions().lr(0.1).amsgrad(true));
  EXPECT_STREQ(opt.name(), "AdamW");
  EXPECT_EQ(opt.defaults().get<bool>("amsgrad"), true);
}

}  // namespace
