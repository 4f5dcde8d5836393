// cereal archives (serialize/archive.hpp): round trips in both formats of module state,
// optimizer state (SGD momentum, Adam amsgrad, AdamW, groups), schedules and generators; the
// header and version checks; the mismatch error; JSON's handling of non-finite values.
#include <cmath>
#include <limits>
#include <random>

#include <xgrad/nn/nn.hpp>
#include "serialize_util.hpp"

using namespace xgrad;
using namespace xgrad::testing;

namespace {

const ArchiveFormat kFormats[] = {ArchiveFormat::binary, ArchiveFormat::json};

std::string extension(ArchiveFormat format) { return format == ArchiveFormat::json ? ".json" : ".xgrad"; }

std::shared_ptr<nn::TransformerEncoder<float>> small_encoder(std::uint64_t seed) {
  manual_seed(seed);
  auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
      nn::TransformerEncoderLayerOptions(4, 2).dim_feedforward(8).dropout(0.2));
  return std::make_shared<nn::TransformerEncoder<float>>(layer, 2, std::make_shared<nn::LayerNorm<float>>(
                                                                       nn::LayerNormOptions(4)));
}

// A module with a parameter and a buffer, for special values and mismatches.
class Holder : public nn::Module<float> {
 public:
  Holder(const Shape& weight, const Shape& stats) : Module("Holder") {
    register_parameter("weight", zeros<float>(weight));
    register_buffer("stats", zeros<float>(stats));
  }
};

template <class T>
nn::StateDict<T> special_values() {
  using L = std::numeric_limits<T>;
  nn::StateDict<T> s;
  s.insert("special", Array<T>{L::quiet_NaN(), L::infinity(), -L::infinity(), T(-0.0), L::denorm_min(), L::max(),
                               L::lowest(), L::min(), T(0.1), T(1) / T(3)});
  s.insert("scalar", Array<T>(T(2.5)));
  s.insert("empty", empty_array<T>({0, 3}));
  s.insert("block.weight", Array<T>{{{1, 2}, {3, 4}}, {{5, 6}, {7, 8}}});
  return s;
}

}  // namespace

TEST(SerializeArchive, FormatFollowsTheExtension) {
  EXPECT_EQ(archive_format("model.json"), ArchiveFormat::json);
  EXPECT_EQ(archive_format("dir.json/model"), ArchiveFormat::binary);
  EXPECT_EQ(archive_format("model.xgrad"), ArchiveFormat::binary);
  EXPECT_EQ(archive_format("json"), ArchiveFormat::binary);
}

// ---- module state ------------------------------------------------------------------------------

TEST(SerializeArchive, ModuleRoundTripInBothFormats) {
  TempDir dir;
  auto saved = small_encoder(1);
  for (ArchiveFormat format : kFormats) {
    const std::string path = dir.file("encoder" + extension(format));
    save(*saved, path);
    auto loaded = small_encoder(2);  // other initial values
    ASSERT_FALSE(same_bits(loaded->state_dict().at("layers.0.linear1.weight"),
                           saved->state_dict().at("layers.0.linear1.weight")));
    const nn::LoadStateDictResult result = load(*loaded, path);
    EXPECT_TRUE(result.missing_keys.empty() && result.unexpected_keys.empty());
    expect_same_state_dict(saved->state_dict(), loaded->state_dict());
    EXPECT_EQ(load_state_dict<float>(path).keys(), saved->state_dict().keys());  // the module's order
  }
}

TEST(SerializeArchive, SpecialValuesZeroDimAndEmptyTensorsKeepTheirBits) {
  TempDir dir;
  for (ArchiveFormat format : kFormats) {
    SCOPED_TRACE(extension(format));
    const auto f = special_values<float>();
    save(f, dir.file("f" + extension(format)));
    expect_same_state_dict(f, load_state_dict<float>(dir.file("f" + extension(format))));
    const auto d = special_values<double>();
    save(d, dir.file("d" + extension(format)));
    expect_same_state_dict(d, load_state_dict<double>(dir.file("d" + extension(format))));
  }
  // JSON spells the non-finite values out (JSON numbers cannot be NaN or infinite).
  const std::string text = state_dict_bytes(special_values<float>(), ArchiveFormat::json);
  EXPECT_EQ(text.find("NaN"), std::string::npos);
  EXPECT_EQ(text.find("Infinity"), std::string::npos);
  EXPECT_NE(text.find("\"non_finite\""), std::string::npos);
  EXPECT_NE(text.find("\"-inf\""), std::string::npos);
}

TEST(SerializeArchive, BinaryKeepsNanPayloads) {
  nn::StateDict<float> s;
  Array<float> a = {0.0f};
  const std::uint32_t payload = 0x7FA00001u;  // a signalling NaN with a payload
  std::memcpy(a.data(), &payload, 4);
  s.insert("nan", a);
  const std::string bytes = state_dict_bytes(s, ArchiveFormat::binary);
  expect_same_state_dict(s, load_state_dict_from_memory<float>(bytes.data(), bytes.size(), ArchiveFormat::binary));
}

TEST(SerializeArchive, JsonNumbersReadBackExactly) {
  // Random bit patterns over the whole range (finite ones): JSON's shortest decimals must parse
  // back to the same double, and float values (written as doubles) to the same float.
  std::mt19937_64 rng(42);
  Array<double> d = Array<double>::from_shape({3000});
  Array<float> f = Array<float>::from_shape({3000});
  for (std::size_t i = 0; i < d.size(); ++i) {
    std::uint64_t bits;
    do {
      bits = rng();
      std::memcpy(&d.data()[i], &bits, 8);
    } while (!std::isfinite(d.data()[i]));
    std::uint32_t fbits;
    do {
      fbits = static_cast<std::uint32_t>(rng());
      std::memcpy(&f.data()[i], &fbits, 4);
    } while (!std::isfinite(f.data()[i]));
  }
  nn::StateDict<double> sd;
  sd.insert("d", d);
  nn::StateDict<float> sf;
  sf.insert("f", f);
  const std::string jd = state_dict_bytes(sd, ArchiveFormat::json), jf = state_dict_bytes(sf, ArchiveFormat::json);
  expect_same_state_dict(sd, load_state_dict_from_memory<double>(jd.data(), jd.size(), ArchiveFormat::json));
  expect_same_state_dict(sf, load_state_dict_from_memory<float>(jf.data(), jf.size(), ArchiveFormat::json));
}

TEST(SerializeArchive, LoadsAcrossPrecisions) {
  for (ArchiveFormat format : kFormats) {
    nn::StateDict<float> f;
    f.insert("x", Array<float>{0.1f, -3.5f, 1e-40f});
    const std::string fb = state_dict_bytes(f, format);
    const auto as_double = load_state_dict_from_memory<double>(fb.data(), fb.size(), format);
    for (std::size_t i = 0; i < 3; ++i)
      EXPECT_EQ(as_double.at("x").data()[i], static_cast<double>(f.at("x").data()[i]));  // exact

    nn::StateDict<double> d;
    d.insert("x", Array<double>{0.1, 1e300, -1e300, 1e-50, 3.4028235677973366e38});
    const std::string db = state_dict_bytes(d, format);
    const auto as_float = load_state_dict_from_memory<float>(db.data(), db.size(), format);
    const float* x = as_float.at("x").data();
    EXPECT_EQ(x[0], 0.1f);
    EXPECT_EQ(x[1], std::numeric_limits<float>::infinity());
    EXPECT_EQ(x[2], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(x[3], 0.0f);
    EXPECT_EQ(x[4], std::numeric_limits<float>::infinity());  // beyond FLT_MAX + half an ulp
  }
}

TEST(SerializeArchive, MismatchThrowsOneErrorListingEveryKeyAndChangesNothing) {
  TempDir dir;
  // Saved: weight (2,3), stats (3), extra (1). Loaded into: weight (3,3), stats (3), missing.
  nn::StateDict<float> state;
  state.insert("weight", Array<float>{{1, 2, 3}, {4, 5, 6}});
  state.insert("stats", Array<float>{7, 8, 9});
  state.insert("extra", Array<float>{1});
  const std::string path = dir.file("state.xgrad");
  save(state, path);

  class Target : public nn::Module<float> {
   public:
    Target() : Module("Target") {
      register_parameter("weight", ones<float>({3, 3}));
      register_buffer("stats", ones<float>({3}));
      register_parameter("missing", ones<float>({2}));
    }
  } target;
  const auto before = target.state_dict();
  expect_error<std::invalid_argument>([&] { load(target, path); },
                                      {"'" + path + "'", "Error(s) in loading state_dict for Target",
                                       "Missing key(s) in state_dict: \"missing\"",
                                       "Unexpected key(s) in state_dict: \"extra\"",
                                       "size mismatch for weight: copying a param with shape (2, 3)",
                                       "the shape in current model is (3, 3)"});
  expect_same_state_dict(before, target.state_dict());  // nothing was copied

  // Non-strict: the missing and unexpected keys are returned, a wrong shape still throws.
  Holder holder({2, 3}, {3});
  const auto result = load(holder, path, /*strict=*/false);
  EXPECT_EQ(result.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_TRUE(same_bits(holder.state_dict().at("stats"), state.at("stats")));
}

// ---- optimizer state -----------------------------------------------------------------------------

namespace {

struct SgdRun {
  std::shared_ptr<nn::Linear<float>> model;
  std::unique_ptr<optim::SGD<float>> optimizer;
  Tensor<float> x;

  SgdRun(std::uint64_t seed, const optim::SGDOptions& options) {
    manual_seed(seed);
    model = std::make_shared<nn::Linear<float>>(3, 2);
    optimizer = std::make_unique<optim::SGD<float>>(model->parameters(), options);
    Generator g(3);
    x = randn<float>({5, 3}, g);
  }
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      optimizer->zero_grad();
      mse_loss(model->forward(x), ones<float>({5, 2})).backward();
      optimizer->step();
    }
  }
};

}  // namespace

TEST(SerializeArchive, SgdMomentumRoundTripContinuesIdentically) {
  TempDir dir;
  const auto options = optim::SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-3);
  for (ArchiveFormat format : kFormats) {
    SgdRun a(1, options);
    a.train(3);
    const std::string model_path = dir.file("m" + extension(format)), opt_path = dir.file("o" + extension(format));
    save(*a.model, model_path);
    save(*a.optimizer, opt_path, parameter_names(*a.optimizer, *a.model));

    SgdRun b(2, optim::SGDOptions(0.5));  // other values, other options, no state
    load(*b.model, model_path);
    load(*b.optimizer, opt_path, parameter_names(*b.optimizer, *b.model));
    expect_same_optimizer_state(*a.optimizer, *b.optimizer);
    const auto& o = static_cast<const optim::SGDOptions&>(b.optimizer->param_groups()[0].options());
    EXPECT_EQ(o.lr(), 0.05);
    EXPECT_EQ(o.momentum(), 0.9);
    EXPECT_EQ(o.weight_decay(), 1e-3);
    EXPECT_TRUE(o.nesterov());
    EXPECT_FALSE(o.maximize());
    ASSERT_TRUE(b.optimizer->state(b.model->weight).has("momentum_buffer"));

    a.train(2);
    b.train(2);
    expect_same_state_dict(a.model->state_dict(), b.model->state_dict());
  }
}

TEST(SerializeArchive, AdamAmsgradWithTwoGroupsRoundTrip) {
  TempDir dir;
  for (ArchiveFormat format : kFormats) {
    SmallRun a(1, 3);
    const std::string path = dir.file("adam" + extension(format));
    const auto names = parameter_names(*a.optimizer, *a.model);
    EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias"}));
    save(*a.optimizer, path, names);

    const OptimizerState<float> state = load_optimizer_state<float>(path);
    EXPECT_EQ(state.optimizer, "Adam");
    ASSERT_EQ(state.param_groups.size(), 2u);
    EXPECT_EQ(state.param_groups[1].params, std::vector<std::string>{"bias"});
    const auto& o = *state.param_groups[1].options;  // loaded: named values (optim::SavedOptions)
    EXPECT_EQ(o.get<optim::Betas>("betas"), (optim::Betas{0.8, 0.99}));
    EXPECT_TRUE(o.get<bool>("amsgrad"));
    EXPECT_EQ(o.get<double>("lr"), a.optimizer->param_groups()[1].options().get_lr());
    EXPECT_EQ(state.param_groups[1].initial_lr, std::optional<double>(0.02));
    EXPECT_EQ(state.param_groups[0].options->get<double>("weight_decay"), 0.001);

    SmallRun b(2, 0);
    load(*b.optimizer, path, parameter_names(*b.optimizer, *b.model));
    expect_same_optimizer_state(*a.optimizer, *b.optimizer);
    EXPECT_EQ(b.optimizer->state(b.model->bias).step, 3);
    EXPECT_TRUE(b.optimizer->state(b.model->bias).has("max_exp_avg_sq"));
  }
}

TEST(SerializeArchive, AdamWOptionsRoundTrip) {
  manual_seed(4);
  nn::Linear<double> model(2, 2);
  optim::AdamW<double> opt(model.parameters(), optim::AdamWOptions(3e-4).eps(1e-6).weight_decay(0.05).maximize(true));
  const auto names = parameter_names(opt, model);
  for (ArchiveFormat format : kFormats) {
    TempDir dir;
    save(opt, dir.file("w" + extension(format)), names);
    const auto state = load_optimizer_state<double>(dir.file("w" + extension(format)));
    const auto& o = *state.param_groups[0].options;
    EXPECT_STREQ(o.optimizer_name(), "AdamW");
    EXPECT_EQ(o.get<double>("lr"), 3e-4);
    EXPECT_EQ(o.get<double>("eps"), 1e-6);
    EXPECT_EQ(o.get<double>("weight_decay"), 0.05);
    EXPECT_TRUE(o.get<bool>("maximize"));
    EXPECT_TRUE(state.state.empty());  // never stepped
  }
}

TEST(SerializeArchive, OptimizerMismatchesSayWhatDiffersAndChangeNothing) {
  TempDir dir;
  SmallRun a(1, 2);
  const std::string path = dir.file("adam.xgrad");
  save(*a.optimizer, path, parameter_names(*a.optimizer, *a.model));

  SgdRun sgd(1, optim::SGDOptions(0.1));
  expect_error<std::invalid_argument>(
      [&] { load(*sgd.optimizer, path, parameter_names(*sgd.optimizer, *sgd.model)); },
      {"'" + path + "'", "the state is of a Adam optimizer, this optimizer is SGD"});

  // One group instead of two.
  optim::Adam<float> one_group(a.model->parameters());
  expect_error<std::invalid_argument>([&] { load(one_group, path, {"weight", "bias"}); },
                                      {"the state has 2 parameter groups, the optimizer has 1"});
  // Other names.
  SmallRun b(2, 1);
  const auto before = b.optimizer->state();
  expect_error<std::invalid_argument>([&] { load(*b.optimizer, path, {"w", "bias"}); },
                                      {"parameter group 0 differs", "missing from the state: \"w\"",
                                       "in the state, not in the group: \"weight\""});
  // Other shapes: a Linear(4, 2) under the same names.
  manual_seed(5);
  nn::Linear<float> wider(4, 2);
  optim::Adam<float> wider_opt(std::vector<optim::ParamGroup<float>>{optim::ParamGroup<float>({wider.weight}),
                                                                     optim::ParamGroup<float>({wider.bias})});
  expect_error<std::invalid_argument>([&] { load(wider_opt, path, {"weight", "bias"}); },
                                      {"has shape (2, 3) but its parameter has shape (2, 4)"});
  EXPECT_TRUE(wider_opt.state(wider.weight).empty());
  // The failed loads left b as it was.
  const auto after = b.optimizer->state();
  for (std::size_t i = 0; i < before.size(); ++i) expect_same_param_state(before[i], after[i], "b");
  // Names that do not match the parameters.
  expect_error<std::invalid_argument>([&] { save(*b.optimizer, dir.file("x"), {"only_one"}); },
                                      {"expected one name for each of the 2 parameters"});
  expect_error<std::invalid_argument>([&] { save(*b.optimizer, dir.file("x"), {"same", "same"}); },
                                      {"the name 'same' is given twice"});
  expect_error<std::invalid_argument>([&] { parameter_names(wider_opt, *b.model); },
                                      {"is not a parameter of the Linear module"});
}

// ---- schedules and generators ------------------------------------------------------------------

TEST(SerializeArchive, SequentialScheduleRoundTripContinuesIdentically) {
  TempDir dir;
  for (ArchiveFormat format : kFormats) {
    auto build = [](optim::Optimizer<float>& opt) {
      auto warmup = std::make_shared<optim::LinearLR<float>>(opt, 0.1, 1.0, 3);
      auto cosine = std::make_shared<optim::CosineAnnealingLR<float>>(opt, 7, 1e-4);
      return std::make_unique<optim::SequentialLR<float>>(
          opt, std::vector<std::shared_ptr<optim::LRScheduler<float>>>{warmup, cosine}, std::vector<int>{3});
    };
    SmallRun a(1, 0), b(2, 0);
    auto sa = build(*a.optimizer);
    for (int i = 0; i < 5; ++i) sa->step();
    const std::string path = dir.file("schedule" + extension(format));
    save(*sa, path);
    expect_same_scheduler_state(sa->state(), load_lr_scheduler_state(path));

    auto sb = build(*b.optimizer);
    load(*sb, path);
    // The optimizer's lrs belong to the optimizer's state: restore them as a checkpoint does.
    load_optimizer_state_dict(*b.optimizer, optimizer_state_dict(*a.optimizer, {"weight", "bias"}),
                              {"weight", "bias"});
    for (int i = 0; i < 6; ++i) {
      sa->step();
      sb->step();
      EXPECT_EQ(sa->get_last_lr(), sb->get_last_lr()) << "step " << i;
    }
  }
}

TEST(SerializeArchive, GeneratorRoundTripContinuesTheStream) {
  TempDir dir;
  for (ArchiveFormat format : kFormats) {
    Generator g(123);
    for (int i = 0; i < 5; ++i) g.next_u64();
    const std::string path = dir.file("gen" + extension(format));
    save(g, path);
    Generator h(7);
    load(h, path);
    EXPECT_EQ(h.get_state(), g.get_state());
    EXPECT_EQ(h.initial_seed(), 123u);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(h.next_u64(), g.next_u64());
  }
}

// ---- headers and versions ----------------------------------------------------------------------

TEST(SerializeArchive, ForeignFilesAreNotXgradArchives) {
  TempDir dir;
  const std::pair<const char*, std::string> cases[] = {
      {"empty", ""},
      {"text", "hello world"},
      {"zero", std::string(64, '\0')},
      {"safetensors", safetensors_bytes(NamedArrays<float>{{"a", Array<float>{1, 2}}})},
  };
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    const std::string path = dir.file(name);
    write_bytes(path, bytes);
    expect_error<FormatError>([&] { load_state_dict<float>(path); }, {"load_state_dict: '" + path + "'",
                                                                      "not an xgrad archive"});
  }
  const std::string json_path = dir.file("model.json");
  write_bytes(json_path, "{\"weights\": [1, 2]}\n");
  expect_error<FormatError>([&] { load_state_dict<float>(json_path); }, {"not an xgrad archive"});
  write_bytes(json_path, "[1, 2");
  expect_error<FormatError>([&] { load_state_dict<float>(json_path); }, {"invalid JSON at byte 5"});
  // A JSON archive under a binary name.
  nn::StateDict<float> s;
  s.insert("a", Array<float>{1});
  write_bytes(dir.file("model.bin"), state_dict_bytes(s, ArchiveFormat::json));
  expect_error<FormatError>([&] { load_state_dict<float>(dir.file("model.bin")); }, {"it looks like JSON"});
  // A missing file is not a format error.
  expect_error<std::runtime_error>([&] { load_state_dict<float>(dir.file("missing")); },
                                   {"cannot open '" + dir.file("missing") + "'"});
}

TEST(SerializeArchive, NewerFormatAndClassVersionsAreRejected) {
  nn::StateDict<float> s;
  s.insert("a", Array<float>{1, 2});
  std::string binary = state_dict_bytes(s, ArchiveFormat::binary);
  // byte 0: endianness flag; 1..8: magic length 5; 9..13: "xgrad"; 14..17: format version.
  ASSERT_EQ(binary.substr(9, 5), "xgrad");
  ASSERT_EQ(binary[14], 2);
  binary[14] = 3;
  expect_error<FormatError>([&] { load_state_dict_from_memory<float>(binary.data(), binary.size(), ArchiveFormat::binary); },
                            {"written by a newer format version 3, this build reads up to 2"});

  std::string json = state_dict_bytes(s, ArchiveFormat::json);
  const std::string version = "\"format_version\": 2";
  ASSERT_NE(json.find(version), std::string::npos);
  json.replace(json.find(version), version.size(), "\"format_version\": 3");
  expect_error<FormatError>([&] { load_state_dict_from_memory<float>(json.data(), json.size(), ArchiveFormat::json); },
                            {"written by a newer format version 3, this build reads up to 2"});

  // The state dict's class version follows the header (1 + 13 + 4 + 8 + "state_dict"); the
  // checksum is recomputed, so that the class version check itself is what refuses.
  const std::string original = state_dict_bytes(s, ArchiveFormat::binary);
  binary = original;
  ASSERT_EQ(binary.substr(26, 10), "state_dict");
  ASSERT_EQ(binary[36], 1);
  binary[36] = 2;
  binary = reseal(original, binary);
  expect_error<FormatError>([&] { load_state_dict_from_memory<float>(binary.data(), binary.size(), ArchiveFormat::binary); },
                            {"the state dict was written with class version 2, this build reads up to 1"});
  json = state_dict_bytes(s, ArchiveFormat::json);
  const std::size_t at = json.find("\"cereal_class_version\": 1", json.find("\"tensor\""));
  ASSERT_NE(at, std::string::npos);
  json[at + std::strlen("\"cereal_class_version\": ")] = '7';
  json = reseal(state_dict_bytes(s, ArchiveFormat::json), json);
  expect_error<FormatError>([&] { load_state_dict_from_memory<float>(json.data(), json.size(), ArchiveFormat::json); },
                            {"the tensor was written with class version 7"});
}

TEST(SerializeArchive, AnArchiveOfAnotherKindSaysWhatItHolds) {
  TempDir dir;
  save(Generator(1), dir.file("gen.xgrad"));
  expect_error<FormatError>([&] { load_state_dict<float>(dir.file("gen.xgrad")); },
                            {"the file holds a random generator's state, not a module's state dict"});
  SmallRun run(1, 1);
  save_checkpoint(run.capture(), dir.file("run.ckpt"));
  expect_error<FormatError>([&] { load_optimizer_state<float>(dir.file("run.ckpt")); },
                            {"holds a checkpoint, not an optimizer's state"});
}

// ---- what JSON cannot hold ------------------------------------------------------------------

TEST(SerializeArchive, JsonRejectsNonFiniteOptionsAndBadStringsBinaryKeepsThem) {
  TempDir dir;
  manual_seed(1);
  nn::Linear<float> model(2, 2);
  optim::SGD<float> opt(model.parameters(), optim::SGDOptions(std::numeric_limits<double>::infinity()));
  const auto names = parameter_names(opt, model);
  const std::string json = dir.file("sgd.json");
  write_bytes(json, "previous");
  expect_error<std::runtime_error>([&] { save(opt, json, names); }, {"cannot write 'lr' = inf to JSON"});
  EXPECT_EQ(read_bytes(json), "previous");
  save(opt, dir.file("sgd.xgrad"), names);
  EXPECT_EQ(load_optimizer_state<float>(dir.file("sgd.xgrad")).param_groups[0].options->get_lr(),
            std::numeric_limits<double>::infinity());

  nn::StateDict<float> s;
  s.insert(std::string("bad\xFF", 4), Array<float>{1});
  s.insert(std::string("nul\0", 4), Array<float>{2});
  expect_error<std::invalid_argument>([&] { state_dict_bytes(s, ArchiveFormat::json); },
                                      {"not valid UTF-8 at byte 3"});
  const std::string binary = state_dict_bytes(s, ArchiveFormat::binary);
  expect_same_state_dict(s, load_state_dict_from_memory<float>(binary.data(), binary.size(), ArchiveFormat::binary));
}
