// train/settings: Settings::add binds every integer type (std::int64_t, as LibTorch's sizes, was a
// 75-line ambiguity error), float and the types it had; values round-trip through their text.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include <xgrad/train/settings.hpp>

using namespace xgrad;

TEST(Settings, IntegerTypesOfEveryWidthRoundTrip) {
  std::int64_t batch = -(std::int64_t{1} << 40);
  long long steps = std::numeric_limits<long long>::max();
  unsigned int heads = 12;
  unsigned long long tokens = std::numeric_limits<unsigned long long>::max();
  std::size_t layers = 6;
  short window = -3;
  float dropout = 0.1f;
  int d_model = 64;
  double lr = 2e-3;
  train::Settings settings;
  settings.add("batch", batch);
  settings.add("steps", steps);
  settings.add("heads", heads);
  settings.add("tokens", tokens);
  settings.add("layers", layers);
  settings.add("window", window);
  settings.add("dropout", dropout);
  settings.add("d-model", d_model);
  settings.add("lr", lr);
  const auto values = settings.values();
  std::map<std::string, std::string> saved(values.begin(), values.end());
  EXPECT_EQ(saved.at("batch"), "-1099511627776");
  EXPECT_EQ(saved.at("steps"), "9223372036854775807");
  EXPECT_EQ(saved.at("heads"), "12");
  EXPECT_EQ(saved.at("tokens"), "18446744073709551615");
  EXPECT_EQ(saved.at("window"), "-3");

  batch = steps = 0;
  heads = 0;
  tokens = layers = 0;
  window = 0;
  dropout = 0;
  d_model = 0;
  lr = 0;
  settings.assign(saved);
  EXPECT_EQ(batch, -(std::int64_t{1} << 40));
  EXPECT_EQ(steps, std::numeric_limits<long long>::max());
  EXPECT_EQ(heads, 12u);
  EXPECT_EQ(tokens, std::numeric_limits<unsigned long long>::max());
  EXPECT_EQ(layers, 6u);
  EXPECT_EQ(window, -3);
  EXPECT_EQ(dropout, 0.1f);
  EXPECT_EQ(d_model, 64);
  EXPECT_EQ(lr, 2e-3);
}

TEST(Settings, MalformedOrOutOfRangeIntegersAreRefused) {
  std::int64_t big = 0;
  EXPECT_THROW(train::parse_setting("12abc", big), std::invalid_argument);
  EXPECT_THROW(train::parse_setting("", big), std::invalid_argument);
  EXPECT_THROW(train::parse_setting("9223372036854775808", big), std::out_of_range);
  train::parse_setting("-9223372036854775808", big);
  EXPECT_EQ(big, std::numeric_limits<std::int64_t>::min());

  short small = 0;
  unsigned int u = 0;
  train::Settings settings;
  settings.add("small", small);
  settings.add("u", u);
  EXPECT_THROW(settings.assign({{"small", "40000"}, {"u", "1"}}), std::out_of_range);
  EXPECT_THROW(settings.assign({{"small", "1"}, {"u", "4294967296"}}), std::out_of_range);
  EXPECT_THROW(settings.assign({{"small", "1"}, {"u", "-1"}}), std::invalid_argument);
  settings.assign({{"small", "-32768"}, {"u", "4294967295"}});
  EXPECT_EQ(small, -32768);
  EXPECT_EQ(u, 4294967295u);
}
