// The golden-fixture loader against tests/fixtures/loader_roundtrip.json, a tiny file written by
// scripts/make_fixtures.py with known values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "fixture.hpp"

using xgrad::testing::Fixture;
using xgrad::testing::load_fixture;

TEST(FixtureLoader, FloatValuesRoundTripExactly) {
  Fixture f = load_fixture("loader_roundtrip");
  EXPECT_EQ(f.name(), "loader_roundtrip");
  EXPECT_EQ(f.dtype(), "float64");
  EXPECT_FALSE(f.torch_version().empty());

  xt::xarray<double> m = f.array<double>("matrix");
  ASSERT_EQ(f.shape("matrix"), (std::vector<std::size_t>{2, 3}));
  ASSERT_EQ(m.dimension(), 2u);
  ASSERT_EQ(m.shape(0), 2u);
  ASSERT_EQ(m.shape(1), 3u);
  // Bit-exact: Python wrote repr(float64), the reader must not lose an ulp.
  EXPECT_EQ(m(0, 0), 0.1);
  EXPECT_EQ(m(0, 1), -2.5);
  EXPECT_EQ(m(0, 2), 1.0 / 3.0);
  EXPECT_EQ(m(1, 0), 1e-300);
  EXPECT_EQ(m(1, 1), M_PI);
  EXPECT_EQ(m(1, 2), 0.0);
  EXPECT_TRUE(std::signbit(m(1, 2)));

  xt::xarray<double> s = f.array<double>("special");
  EXPECT_EQ(s(0), std::numeric_limits<double>::infinity());
  EXPECT_EQ(s(1), -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(s(2)));
  EXPECT_EQ(s(3), std::numeric_limits<double>::denorm_min());

  EXPECT_EQ(f.array<double>("scalar").dimension(), 0u);
  EXPECT_EQ(f.scalar<double>("scalar"), std::sqrt(2.0));
  EXPECT_EQ(f.array<float>("matrix")(0, 0), 0.1f);

  xt::xarray<double> empty = f.array<double>("empty");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(f.shape("empty"), (std::vector<std::size_t>{0, 3}));

  auto t = f.tensor<double>("matrix", /*requires_grad=*/true);
  EXPECT_TRUE(t.requires_grad());
  EXPECT_EQ(t.value(), m);
}

TEST(FixtureLoader, BoolAndIndexTensors) {
  Fixture f = load_fixture("loader_roundtrip");
  EXPECT_EQ(f.kind("mask"), "bool");
  EXPECT_EQ(f.kind("index"), "int64");
  EXPECT_EQ(f.kind("matrix"), "float");
  EXPECT_EQ(f.bool_array("mask"), (xt::xarray<bool>{{true, false}, {false, true}}));
  EXPECT_EQ(f.index_array("index"), (xt::xarray<std::int64_t>{0, -1, std::int64_t(1) << 40}));
}

TEST(FixtureLoader, NamesAndPrefixes) {
  Fixture f = load_fixture("loader_roundtrip");
  EXPECT_EQ(f.names_with_prefix("param."), (std::vector<std::string>{"param.a", "param.b.weight"}));
  EXPECT_EQ(f.names().size(), 8u);
  EXPECT_TRUE(f.has("mask"));
  EXPECT_FALSE(f.has("param."));

  auto params = f.arrays_with_prefix<double>("param.");
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params.at("a"), (xt::xarray<double>{1.0, 2.0}));
  const xt::xarray<double>& b = params.at("b.weight");
  ASSERT_EQ(b.dimension(), 2u);
  EXPECT_EQ(b.shape(0), 2u);
  EXPECT_EQ(b.shape(1), 1u);
  EXPECT_EQ(b(0, 0), 3.0);
  EXPECT_EQ(b(1, 0), 4.0);

  EXPECT_EQ(f.config()["purpose"], "the C++ loader's own test");
  EXPECT_EQ(f.config()["nested"]["list"][1].get<int>(), 2);
  EXPECT_TRUE(f.config()["nested"]["flag"].get<bool>());
}

TEST(FixtureLoader, MissingNameIsAClearError) {
  Fixture f = load_fixture("loader_roundtrip");
  try {
    f.array<double>("no_such_tensor");
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("loader_roundtrip"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"no_such_tensor\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("param.b.weight"), std::string::npos) << "lists what it has: " << msg;
  }
  EXPECT_THROW(f.bool_array("missing"), std::invalid_argument);
  EXPECT_THROW(f.shape("missing"), std::invalid_argument);
}

TEST(FixtureLoader, WrongKindIsAnError) {
  Fixture f = load_fixture("loader_roundtrip");
  EXPECT_THROW(f.array<double>("mask"), std::invalid_argument);
  EXPECT_THROW(f.bool_array("matrix"), std::invalid_argument);
  EXPECT_THROW(f.index_array("mask"), std::invalid_argument);
  EXPECT_THROW(f.scalar<double>("matrix"), std::invalid_argument);
}

TEST(FixtureLoader, MissingFileAndMalformedData) {
  try {
    load_fixture("no_such_fixture");
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_fixture.json"), std::string::npos) << e.what();
  }
  // Data and shape that disagree, a non-number, a bool that is not 0/1.
  Fixture bad("bad", nlohmann::json::parse(R"({"tensors": {
      "short": {"shape": [2, 2], "data": [1, 2, 3]},
      "word": {"shape": [1], "data": ["one"]},
      "flag": {"shape": [1], "dtype": "bool", "data": [2]}}})"));
  EXPECT_THROW(bad.array<double>("short"), std::runtime_error);
  EXPECT_THROW(bad.array<double>("word"), std::runtime_error);
  EXPECT_THROW(bad.bool_array("flag"), std::runtime_error);
  EXPECT_THROW(Fixture("no_tensors", nlohmann::json::parse("{}")), std::runtime_error);
}

// Every fixture the script writes for the nn and optim suites is readable, with consistent
// dtype names; spot-checks one file of each family.
TEST(FixtureLoader, GeneratedFamiliesLoad) {
  Fixture lin = load_fixture("nn_linear_float32");
  EXPECT_EQ(lin.dtype(), "float32");
  EXPECT_EQ(lin.config()["module"], "Linear");
  EXPECT_EQ(lin.names_with_prefix("param."), (std::vector<std::string>{"param.bias", "param.weight"}));
  EXPECT_EQ(lin.shape("param.weight"), (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(lin.shape("grad.input"), lin.shape("input"));
  // float32 data are exact float32 values.
  xt::xarray<double> w = lin.array<double>("param.weight");
  for (double v : w) EXPECT_EQ(static_cast<double>(static_cast<float>(v)), v);

  Fixture emb = load_fixture("nn_embedding_padding_float64");
  EXPECT_EQ(emb.kind("input"), "int64");
  EXPECT_EQ(emb.config()["options"]["padding_idx"].get<int>(), 2);

  Fixture lr = load_fixture("lr_step");
  EXPECT_EQ(lr.shape("lrs"), (std::vector<std::size_t>{30}));
  EXPECT_EQ(lr.array<double>("lrs")(7), 0.05);

  Fixture opt = load_fixture("optim_mlp_adam");
  EXPECT_EQ(opt.names_with_prefix("step5.param.").size(), opt.names_with_prefix("param.").size());
}

// Every committed fixture parses, names itself, and has data matching each shape (a truncated or
// hand-edited file fails here rather than as a confusing numeric mismatch elsewhere).
TEST(FixtureLoader, EveryFixtureIsWellFormed) {
  std::size_t files = 0;
  for (const auto& file : std::filesystem::directory_iterator(XGRAD_FIXTURES_DIR)) {
    if (file.path().extension() != ".json") continue;
    const std::string name = file.path().stem().string();
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    ++files;
    EXPECT_EQ(f.config().is_object(), true);
    EXPECT_TRUE(f.dtype() == "float64" || f.dtype() == "float32") << f.dtype();
    for (const std::string& t : f.names()) {
      const std::string kind = f.kind(t);
      if (kind == "bool") EXPECT_NO_THROW(f.bool_array(t)) << t;
      else if (kind == "int64") EXPECT_NO_THROW(f.index_array(t)) << t;
      else EXPECT_NO_THROW(f.array<double>(t)) << t;
    }
  }
  EXPECT_GT(files, 50u) << "the fixtures directory looks incomplete: run scripts/make_fixtures.py";
}
