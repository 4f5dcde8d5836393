// models::load_hf_gpt2 / save_hf_gpt2 against tests/fixtures/hf-gpt2-tiny (a random GPT2LMHeadModel
// written by transformers' save_pretrained, with its logits and greedy generations: see the README
// there): the logits within 1e-5, the same 40 greedy tokens with and without the KV cache; the other
// layouts transformers writes (shards, F16 and BF16, GPT2Model names with the mask buffers and a
// stored lm_head); save and reload; every refusal naming the file and the key; a failed save leaving
// the folder's files as they were.
#include "serialize_util.hpp"

#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>
#include <xtensor/xmanipulation.hpp>

#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURES_DIR) + "/hf-gpt2-tiny";

json read_json(const std::string& path) { return json::parse(read_bytes(path)); }

void write_json(const std::string& path, const json& j) { write_bytes(path, j.dump(2)); }

// A copy of the fixture's config.json and model.safetensors in a fresh folder.
struct FixtureCopy {
  TempDir dir;
  FixtureCopy() {
    for (const char* name : {"config.json", "model.safetensors"})
      fs::copy_file(kFixture + "/" + name, dir.file(name));
  }
  std::string path() const { return dir.path(); }
  std::string file(const std::string& name) const { return dir.file(name); }
  void edit_config(const std::function<void(json&)>& edit) const {
    json c = read_json(file("config.json"));
    edit(c);
    write_json(file("config.json"), c);
  }
};

// The fixture's tensors as stored (Hugging Face names and layouts), in float.
NamedArrays<float> fixture_tensors() { return load_safetensors<float>(kFixture + "/model.safetensors"); }

// ---- safetensors files of any dtype, written by hand ---------------------------------------------

std::uint16_t bf16_bits(float x) {  // round to nearest even
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return static_cast<std::uint16_t>((b + 0x7FFF + ((b >> 16) & 1)) >> 16);
}

float from_bf16(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

std::uint16_t f16_bits(float x) {  // finite values within half's range, round to nearest even
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::abs(static_cast<double>(x));
  if (a == 0) return sign;
  int e = std::ilogb(a);
  if (e < -14) return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, 24))));
  double m = std::nearbyint(std::ldexp(a, 10 - e));  // in [1024, 2048]
  if (m == 2048) m = 1024, ++e;
  return static_cast<std::uint16_t>(sign | ((e + 15) << 10) | (static_cast<int>(m) - 1024));
}

float from_f16(std::uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return static_cast<float>((h & 0x8000) ? -v : v);
}

struct RawTensor {
  std::string name, dtype;
  Shape shape;
  std::string bytes;
};

RawTensor encode(const std::string& name, const Array<float>& a, const std::string& dtype) {
  RawTensor t{name, dtype, shape_of(a), ""};
  for (float v : a) {
    if (dtype == "F32") {
      t.bytes.append(reinterpret_cast<const char*>(&v), 4);  // little-endian machine, as the library's tests
    } else {
      const std::uint16_t h = dtype == "F16" ? f16_bits(v) : bf16_bits(v);
      t.bytes.push_back(static_cast<char>(h & 0xFF));
      t.bytes.push_back(static_cast<char>(h >> 8));
    }
  }
  return t;
}

// The value a stored dtype gives back.
Array<float> rounded(const Array<float>& a, const std::string& dtype) {
  Array<float> r = a;
  for (float& v : r) v = dtype == "F16" ? from_f16(f16_bits(v)) : dtype == "BF16" ? from_bf16(bf16_bits(v)) : v;
  return r;
}

std::string safetensors_file(const std::vector<RawTensor>& tensors) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  const std::string h = header.dump();
  std::string length(8, '\0');
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((h.size() >> (8 * i)) & 0xFF);
  return length + h + data;
}

// Rewrites the folder's model.safetensors with `tensors` (F32).
void write_model(const std::string& dir, const NamedArrays<float>& tensors) {
  save_safetensors(tensors, dir + "/model.safetensors", {{"format", "pt"}});
}

NamedArrays<float> without(NamedArrays<float> tensors, const std::string& name) {
  const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
  EXPECT_NE(it, tensors.end()) << name;
  if (it != tensors.end()) tensors.erase(it);
  return tensors;
}

Array<float>& tensor(NamedArrays<float>& tensors, const std::string& name) {
  for (auto& [n, a] : tensors)
    if (n == name) return a;
  throw std::invalid_argument("no tensor " + name);
}

// The fixture's two input rows and logits.
IndexArray fixture_ids(const json& expected) {
  IndexArray ids = IndexArray::from_shape({2, 8});
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 8; ++j) ids(i, j) = expected["input_ids"][i][j].get<std::int64_t>();
  return ids;
}

template <class T>
Array<T> logits_of(models::GPT<T>& model, const IndexArray& ids) {
  NoGradGuard no_grad;
  model.eval();
  return model.forward(ids).value();
}

template <class T>
double max_error_against_fixture(models::GPT<T>& model) {
  const json expected = read_json(kFixture + "/expected.json");
  const Array<T> logits = logits_of(model, fixture_ids(expected));
  EXPECT_EQ(shape_of(logits), (Shape{2, 8, 384}));
  double worst = 0;
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 8; ++j)
      for (std::size_t v = 0; v < 384; ++v)
        worst = std::max(worst, std::abs(static_cast<double>(logits(i, j, v)) - expected["logits"][i][j][v].get<double>()));
  return worst;
}

// The message of the std::runtime_error (FormatError included) that loading `dir` throws.
std::string load_error(const std::string& dir) {
  try {
    models::load_hf_gpt2<float>(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a std::runtime_error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected load_hf_gpt2 to throw";
  return "";
}

// Expects the message to hold every fragment.
void expect_names(const std::string& message, std::initializer_list<std::string> fragments) {
  for (const std::string& f : fragments)
    EXPECT_NE(message.find(f), std::string::npos) << "message \"" << message << "\" lacks \"" << f << "\"";
}

}  // namespace

// ---- the fixture -------------------------------------------------------------------------------

TEST(HFGPT2, ReadsTheFixturesConfig) {
  const models::GPTConfig c = models::load_hf_gpt2_config(kFixture);
  EXPECT_EQ(c.vocab_size, 384);
  EXPECT_EQ(c.block_size, 128);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_inner, 0);
  EXPECT_EQ(c.activation, "gelu_tanh");
  EXPECT_EQ(c.layer_norm_eps, 1e-5);
  EXPECT_EQ(c.dropout, 0.0);
  EXPECT_TRUE(c.bias);
}

TEST(HFGPT2, GivesTheFixturesLogitsInFloatAndDouble) {
  auto model = models::load_hf_gpt2<float>(kFixture);
  EXPECT_LE(max_error_against_fixture(*model), 1e-5);
  auto model64 = models::load_hf_gpt2<double>(kFixture);
  EXPECT_LE(max_error_against_fixture(*model64), 1e-5);
  // Conv1D weights are transposed into Linear's layout.
  const NamedArrays<float> stored = fixture_tensors();
  const auto state = model->state_dict();
  for (const auto& [name, value] : stored) {
    if (name == "transformer.h.1.mlp.c_fc.weight") {
      EXPECT_EQ(shape_of(state.at("h.layers.1.linear1.weight")), (Shape{256, 64}));
      EXPECT_EQ(state.at("h.layers.1.linear1.weight")(5, 3), value(3, 5));
    }
    if (name == "transformer.h.0.attn.c_attn.weight") {
      EXPECT_EQ(state.at("h.layers.0.self_attn.in_proj_weight")(130, 7), value(7, 130));
    }
  }
}

TEST(HFGPT2, Generates40GreedyTokensWithAndWithoutTheCache) {
  auto model = models::load_hf_gpt2<float>(kFixture);
  const json expected = read_json(kFixture + "/expected.json");
  IndexArray prompt = IndexArray::from_shape({1, 8});
  for (std::size_t j = 0; j < 8; ++j) prompt(0, j) = expected["input_ids"][0][j].get<std::int64_t>();
  SamplingOptions greedy;
  greedy.greedy = true;
  for (bool use_cache : {true, false}) {
    SCOPED_TRACE(use_cache ? "with the cache" : "without the cache");
    const IndexArray out = model->generate(prompt, 40, greedy, nullptr, use_cache);
    const auto& want = expected[use_cache ? "greedy_40_cache" : "greedy_40_nocache"];
    ASSERT_EQ(out.shape(1), want.size());
    for (std::size_t j = 0; j < want.size(); ++j) EXPECT_EQ(out(0, j), want[j].get<std::int64_t>()) << "token " << j;
  }
}

// ---- the other layouts of a GPT-2 folder ------------------------------------------------------

TEST(HFGPT2, LoadsShardsOfF16AndBF16) {
  // Two shards and an index, as save_pretrained(max_shard_size=...) writes; the first shard in F16,
  // the second in BF16. The model equals the F32 fixture's with its values rounded the same way.
  FixtureCopy sharded, reference;
  fs::remove(sharded.file("model.safetensors"));
  const NamedArrays<float> tensors = fixture_tensors();
  std::vector<RawTensor> first, second;
  NamedArrays<float> rounded_tensors;
  json map = json::object();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, value] = tensors[i];
    const bool in_first = i < tensors.size() / 2;
    const std::string dtype = in_first ? "F16" : "BF16";
    (in_first ? first : second).push_back(encode(name, value, dtype));
    rounded_tensors.emplace_back(name, rounded(value, dtype));
    map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_bytes(sharded.file("model-00001-of-00002.safetensors"), safetensors_file(first));
  write_bytes(sharded.file("model-00002-of-00002.safetensors"), safetensors_file(second));
  write_json(sharded.file("model.safetensors.index.json"), {{"metadata", {{"total_size", 265728}}}, {"weight_map", map}});
  write_model(reference.path(), rounded_tensors);

  auto from_shards = models::load_hf_gpt2<float>(sharded.path());
  auto from_f32 = models::load_hf_gpt2<float>(reference.path());
  const IndexArray ids = fixture_ids(read_json(kFixture + "/expected.json"));
  EXPECT_TRUE(same_bits(logits_of(*from_shards, ids), logits_of(*from_f32, ids)));
  // Rounding to 16 bits moved the weights: the logits still agree with the fixture's roughly.
  EXPECT_GT(max_error_against_fixture(*from_shards), 1e-6);
  EXPECT_LT(max_error_against_fixture(*from_shards), 0.1);
}

TEST(HFGPT2, LoadsGPT2ModelNamesWithTheMaskBuffersAndAStoredHead) {
  // The hub's gpt2 checkpoint: names without "transformer.", the attention mask buffers
  // h.{i}.attn.bias (1, 1, P, P) and h.{i}.attn.masked_bias, and lm_head.weight equal to wte's.
  FixtureCopy copy;
  NamedArrays<float> tensors;
  for (const auto& [name, value] : fixture_tensors()) tensors.emplace_back(name.substr(std::strlen("transformer.")), value);
  for (int i = 0; i < 2; ++i) {
    Array<float> mask = Array<float>::from_shape({1, 1, 128, 128});
    for (std::size_t q = 0; q < 128; ++q)
      for (std::size_t k = 0; k < 128; ++k) mask(0, 0, q, k) = k <= q ? 1.0f : 0.0f;
    tensors.emplace_back("h." + std::to_string(i) + ".attn.bias", mask);
    tensors.emplace_back("h." + std::to_string(i) + ".attn.masked_bias", Array<float>(-1e4f));
  }
  const Array<float> wte = tensor(tensors, "wte.weight");
  tensors.emplace_back("lm_head.weight", wte);
  write_model(copy.path(), tensors);
  auto model = models::load_hf_gpt2<float>(copy.path());
  auto fixture = models::load_hf_gpt2<float>(kFixture);
  const IndexArray ids = fixture_ids(read_json(kFixture + "/expected.json"));
  EXPECT_TRUE(same_bits(logits_of(*model, ids), logits_of(*fixture, ids)));
}

TEST(HFGPT2, SkipsBoolAndU8MaskBuffersWithoutReadingThem) {
  // Older transformers stored the causal mask h.{i}.attn.bias as BOOL or U8 (1, 1, P, P): skipped as
  // the F32 ones are, whatever their dtype, and their bytes are not converted.
  FixtureCopy copy;
  std::vector<RawTensor> raw;
  for (const auto& [name, value] : fixture_tensors()) raw.push_back(encode(name, value, "F32"));
  std::string mask(128 * 128, '\0');
  for (std::size_t q = 0; q < 128; ++q)
    for (std::size_t k = 0; k <= q; ++k) mask[q * 128 + k] = 1;
  raw.push_back({"transformer.h.0.attn.bias", "BOOL", {1, 1, 128, 128}, mask});
  raw.push_back({"transformer.h.1.attn.bias", "U8", {1, 1, 128, 128}, mask});
  raw.push_back({"transformer.h.0.attn.masked_bias", "U8", {}, std::string(1, '\0')});
  raw.push_back({"transformer.h.1.attn.masked_bias", "BOOL", {}, std::string(1, '\1')});
  write_bytes(copy.file("model.safetensors"), safetensors_file(raw));
  auto model = models::load_hf_gpt2<float>(copy.path());
  EXPECT_LE(max_error_against_fixture(*model), 1e-5);
}

TEST(HFGPT2, AStoredHeadBitwiseEqualToWteIsTiedEvenWithANaN) {
  // Tied weights are one tensor: a NaN in wte is in lm_head too, and NaN == NaN is false, so the
  // comparison is of bits.
  FixtureCopy copy;
  NamedArrays<float> tensors = fixture_tensors();
  tensor(tensors, "transformer.wte.weight")(3, 4) = std::numeric_limits<float>::quiet_NaN();
  tensors.emplace_back("lm_head.weight", tensor(tensors, "transformer.wte.weight"));
  write_model(copy.path(), tensors);
  auto model = models::load_hf_gpt2<float>(copy.path());
  EXPECT_TRUE(std::isnan(model->state_dict().at("wte.weight")(3, 4)));
  EXPECT_EQ(model->state_dict().at("wte.weight")(3, 5), tensor(tensors, "transformer.wte.weight")(3, 5));
}

TEST(HFGPT2, LoadsWeightsIntoAModelBuiltFromAnEditedConfig) {
  models::GPTConfig c = models::load_hf_gpt2_config(kFixture);
  c.dropout = 0.1;  // for fine-tuning
  models::GPT<float> model(c);
  models::load_hf_gpt2_weights(model, kFixture);
  EXPECT_LE(max_error_against_fixture(model), 1e-5);  // eval mode: no dropout
  models::GPTConfig wider = c;
  wider.n_embd = 128;
  models::GPT<float> other(wider);
  expect_names(error_of([&] { models::load_hf_gpt2_weights(other, kFixture); }),
               {"model.safetensors", "\"transformer.wte.weight\"", "(384, 64)", "(384, 128)"});
}

// ---- saving ------------------------------------------------------------------------------------

TEST(HFGPT2, SavesWhatTheFixtureHoldsAndReloadsTheSameLogits) {
  auto model = models::load_hf_gpt2<float>(kFixture);
  TempDir out;
  const std::string dir = out.file("saved");  // created by the save
  models::save_hf_gpt2(*model, dir);
  EXPECT_EQ(out.entries(), (std::set<std::string>{"saved"}));

  // The same tensor names, shapes and dtypes as transformers' file, in its order; here even the
  // same bytes, since the values are the fixture's.
  const SafetensorsHeader want = read_safetensors_header(kFixture + "/model.safetensors");
  const SafetensorsHeader got = read_safetensors_header(dir + "/model.safetensors");
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  for (std::size_t i = 0; i < want.tensors.size(); ++i) {
    EXPECT_EQ(got.tensors[i].name, want.tensors[i].name);
    EXPECT_EQ(got.tensors[i].dtype, want.tensors[i].dtype) << want.tensors[i].name;
    EXPECT_EQ(got.tensors[i].shape, want.tensors[i].shape) << want.tensors[i].name;
  }
  EXPECT_EQ(got.metadata, want.metadata);
  EXPECT_EQ(read_bytes(dir + "/model.safetensors"), read_bytes(kFixture + "/model.safetensors"));

  // config.json: GPT2Config's keys as transformers writes them (but its version), the same values.
  json saved = read_json(dir + "/config.json"), fixture = read_json(kFixture + "/config.json");
  fixture.erase("transformers_version");
  EXPECT_EQ(saved, fixture);

  auto again = models::load_hf_gpt2<float>(dir);
  const IndexArray ids = fixture_ids(read_json(kFixture + "/expected.json"));
  EXPECT_TRUE(same_bits(logits_of(*again, ids), logits_of(*model, ids)));
}

TEST(HFGPT2, SavesAndReloadsOtherOptionsInDouble) {
  models::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 9;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 8;
  c.n_inner = 12;
  c.activation = "gelu";
  c.layer_norm_eps = 1e-6;
  c.dropout = 0.25;
  Generator gen(7);
  models::GPT<double> model(c, &gen);
  for (auto& p : model.parameters())
    for (auto& v : p.mutable_value()) v += 0.3 * (gen.uniform() - 0.5);
  TempDir out;
  models::save_hf_gpt2(model, out.path());
  const json config = read_json(out.file("config.json"));
  EXPECT_EQ(config["n_inner"], 12);
  EXPECT_EQ(config["activation_function"], "gelu");
  EXPECT_EQ(config["layer_norm_epsilon"], 1e-6);
  EXPECT_EQ(config["attn_pdrop"], 0.25);
  EXPECT_EQ(config["n_positions"], 9);

  auto again = models::load_hf_gpt2<double>(out.path());
  EXPECT_EQ(again->config().n_inner, 12);
  EXPECT_EQ(again->config().activation, "gelu");
  EXPECT_EQ(again->config().layer_norm_eps, 1e-6);
  EXPECT_EQ(again->config().dropout, 0.25);
  // Saved as F32: every value is the original rounded to float.
  const auto before = model.state_dict(), after = again->state_dict();
  ASSERT_EQ(before.keys(), after.keys());
  for (const auto& [name, value] : before) {
    Array<double> want = value;
    for (double& v : want) v = static_cast<float>(v);
    EXPECT_TRUE(same_bits(after.at(name), want)) << name;
  }
}

TEST(HFGPT2, AFailedSaveLeavesTheFolderAsItWas) {
  auto model = models::load_hf_gpt2<float>(kFixture);
  models::GPTConfig other = model->config();
  other.n_layer = 1;  // a different model, so a save that went through would change both files
  models::GPT<float> smaller(other);

  FixtureCopy folder;
  const std::string config_before = read_bytes(folder.file("config.json"));
  const std::string model_before = read_bytes(folder.file("model.safetensors"));
  const auto unchanged = [&] {
    EXPECT_EQ(read_bytes(folder.file("config.json")), config_before);
    EXPECT_EQ(read_bytes(folder.file("model.safetensors")), model_before);
    EXPECT_EQ(folder.dir.entries(), (std::set<std::string>{"config.json", "model.safetensors"}));
  };

  // A model GPT-2 cannot hold: refused before anything is written.
  models::GPTConfig no_bias = other;
  no_bias.bias = false;
  models::GPT<float> biasless(no_bias);
  XGRAD_EXPECT_THROW_MSG(models::save_hf_gpt2(biasless, folder.path()), "save_hf_gpt2", "bias=false");
  unchanged();

  // The write of model.safetensors fails halfway (a file size limit, as a full disk): the new
  // config.json, already written, is not put in place either.
  rlimit original{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &original), 0);
  rlimit limited = original;
  limited.rlim_cur = 64 * 1024;
  auto* previous_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    models::save_hf_gpt2(smaller, folder.path());
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &original);
  ::signal(SIGXFSZ, previous_handler);
  expect_names(message, {"save_hf_gpt2", folder.file("model.safetensors"), std::strerror(EFBIG)});
  unchanged();

  // A target that is not a regular file: refused before anything is written.
  TempDir odd;
  fs::copy_file(kFixture + "/model.safetensors", odd.file("model.safetensors"));
  fs::create_directory(odd.file("config.json"));
  expect_names(error_of([&] { models::save_hf_gpt2(smaller, odd.path()); }), {odd.file("config.json"), "not a regular file"});
  EXPECT_EQ(read_bytes(odd.file("model.safetensors")), model_before);
  EXPECT_EQ(odd.entries(), (std::set<std::string>{"config.json", "model.safetensors"}));

  // And the save that can go through replaces both, and adds generation_config.json.
  models::save_hf_gpt2(smaller, folder.path());
  EXPECT_EQ(models::load_hf_gpt2<float>(folder.path())->config().n_layer, 1);
  EXPECT_EQ(folder.dir.entries(),
            (std::set<std::string>{"config.json", "generation_config.json", "model.safetensors"}));
}

TEST(HFGPT2, SavesTheModelsTokenIdsAndGenerationConfig) {
  // The fixture's generation_config.json (transformers' own) comes back byte for byte, whether it
  // is copied from the folder or made from config.json's ids (a folder without one).
  TempDir out;
  models::save_hf_gpt2(*models::load_hf_gpt2<float>(kFixture), out.file("copied"));
  EXPECT_EQ(read_bytes(out.file("copied/generation_config.json")), read_bytes(kFixture + "/generation_config.json"));
  FixtureCopy without_generation;  // config.json and model.safetensors only
  models::save_hf_gpt2(*models::load_hf_gpt2<float>(without_generation.path()), out.file("made"));
  EXPECT_EQ(read_bytes(out.file("made/generation_config.json")), read_bytes(kFixture + "/generation_config.json"));

  // A model built here of 500 tokens: 50256 is not one of them, its last id (499) stands for it.
  models::GPTConfig c;
  c.vocab_size = 500;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  models::GPT<float> model(c);
  models::save_hf_gpt2(model, out.file("fresh"));
  const json fresh = read_json(out.file("fresh/config.json"));
  EXPECT_EQ(fresh["bos_token_id"], 499);
  EXPECT_EQ(fresh["eos_token_id"], 499);
  json generation = read_json(out.file("fresh/generation_config.json"));
  EXPECT_EQ(generation, json::parse(R"({"_from_model_config": true, "bos_token_id": 499, "eos_token_id": 499,
      "output_attentions": false, "output_hidden_states": false, "transformers_version": "5.17.0",
      "use_cache": true})"));

  // That folder with bos and eos 0 and a generation config of its own: loaded, saved elsewhere, both
  // come back as they were.
  json config = fresh;
  config["bos_token_id"] = 0;
  config["eos_token_id"] = 0;
  write_json(out.file("fresh/config.json"), config);
  generation["bos_token_id"] = 0;
  generation["eos_token_id"] = 0;
  generation["max_length"] = 30;
  write_json(out.file("fresh/generation_config.json"), generation);
  auto loaded = models::load_hf_gpt2<float>(out.file("fresh"));
  EXPECT_EQ(loaded->config().bos_token_id, 0);
  EXPECT_EQ(loaded->config().eos_token_id, 0);
  models::save_hf_gpt2(*loaded, out.file("again"));
  EXPECT_EQ(read_json(out.file("again/config.json")), config);
  EXPECT_EQ(read_json(out.file("again/generation_config.json")), generation);

  // Without a generation config, the ids of config.json make it; a null id stays null (and out).
  config["eos_token_id"] = nullptr;
  write_json(out.file("fresh/config.json"), config);
  fs::remove(out.file("fresh/generation_config.json"));
  models::save_hf_gpt2(*models::load_hf_gpt2<float>(out.file("fresh")), out.file("null"));
  EXPECT_EQ(read_json(out.file("null/config.json")), config);
  generation = read_json(out.file("null/generation_config.json"));
  EXPECT_EQ(generation["bos_token_id"], 0);
  EXPECT_FALSE(generation.contains("eos_token_id"));
}

// ---- bad folders: each error names the file and the key ----------------------------------------

TEST(HFGPT2, RefusesConfigSizesTheWeightsDoNotHaveBeforeBuildingAModel) {
  // load_hf_gpt2_config is what a fine-tuning program builds its GPT from: a forged size would
  // allocate (a billion positions of wpe) before the weights were looked at.
  struct Case {
    std::function<void(json&)> edit;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {[](json& c) { c["n_positions"] = 1000000000; },
       {"\"n_positions\" is 1000000000", "\"transformer.wpe.weight\"", "128 rows"}},
      {[](json& c) { c["vocab_size"] = 2000000000; },
       {"\"vocab_size\" is 2000000000", "\"transformer.wte.weight\"", "384 rows"}},
      {[](json& c) { c["n_embd"] = 1048576; }, {"\"n_embd\" is 1048576", "\"transformer.wte.weight\"", "64 columns"}},
      {[](json& c) { c["n_inner"] = 100000000; },
       {"\"n_inner\" is 100000000", "\"transformer.h.0.mlp.c_fc.weight\"", "256 columns"}},
      {[](json& c) { c["n_layer"] = 100000; }, {"\"n_layer\" is 100000", "\"transformer.h.99999.attn.c_attn.weight\""}},
  };
  for (const Case& k : cases) {
    FixtureCopy copy;
    copy.edit_config(k.edit);
    std::string message;
    try {
      models::load_hf_gpt2_config(copy.path());
      ADD_FAILURE() << "load_hf_gpt2_config accepted the forged config";
    } catch (const FormatError& e) {
      message = e.what();
    }
    SCOPED_TRACE(message);
    expect_names(message, {copy.file("config.json"), copy.file("model.safetensors")});
    for (const std::string& name : k.names) expect_names(message, {name});
  }
  // A folder of config.json alone (to build a fresh model from) is read as before.
  FixtureCopy config_only;
  fs::remove(config_only.file("model.safetensors"));
  EXPECT_EQ(models::load_hf_gpt2_config(config_only.path()).block_size, 128);
}

TEST(HFGPT2, RefusesAFolderWithoutConfigOrWeights) {
  FixtureCopy copy;
  fs::remove(copy.file("config.json"));
  expect_names(load_error(copy.path()), {copy.file("config.json")});
  FixtureCopy no_weights;
  fs::remove(no_weights.file("model.safetensors"));
  expect_names(load_error(no_weights.path()), {no_weights.path(), "model.safetensors"});
}

TEST(HFGPT2, RefusesAnotherModelTypeAndBadConfigValues) {
  struct Case {
    std::function<void(json&)> edit;
    std::vector<std::string> names;
  };
  const std::vector<Case> cases = {
      {[](json& c) { c["model_type"] = "bert"; }, {"\"model_type\"", "bert"}},
      {[](json& c) { c.erase("model_type"); }, {"\"model_type\""}},
      {[](json& c) { c["activation_function"] = "silu"; }, {"\"activation_function\"", "silu"}},
      {[](json& c) { c["scale_attn_by_inverse_layer_idx"] = true; }, {"\"scale_attn_by_inverse_layer_idx\"", "true"}},
      {[](json& c) { c["reorder_and_upcast_attn"] = true; }, {"\"reorder_and_upcast_attn\""}},
      {[](json& c) { c["add_cross_attention"] = true; }, {"\"add_cross_attention\""}},
      {[](json& c) { c["scale_attn_weights"] = false; }, {"\"scale_attn_weights\"", "false"}},
      {[](json& c) { c["tie_word_embeddings"] = false; }, {"\"tie_word_embeddings\""}},
      {[](json& c) { c["n_embd"] = "64"; }, {"\"n_embd\"", "\"64\""}},
      {[](json& c) { c["n_layer"] = 0; }, {"\"n_layer\""}},
      {[](json& c) { c["vocab_size"] = 384.5; }, {"\"vocab_size\""}},
      {[](json& c) { c["n_head"] = 3; }, {"\"n_head\"", "\"n_embd\""}},
      {[](json& c) { c["n_inner"] = -1; }, {"\"n_inner\""}},
      {[](json& c) { c["layer_norm_epsilon"] = "small"; }, {"\"layer_norm_epsilon\""}},
      {[](json& c) { c["attn_pdrop"] = 0.1; }, {"\"attn_pdrop\"", "\"resid_pdrop\""}},
      {[](json& c) { c["scale_attn_weights"] = 1; }, {"\"scale_attn_weights\""}},
      {[](json& c) {
         c = json::array({1, 2});
       },
       {"not a JSON object"}},
      {[](json& c) { c["eos_token_id"] = -5; }, {"\"eos_token_id\"", "-5"}},
      {[](json& c) {
         c["bos_token_id"] = json::array({0, 1});
       },
       {"\"bos_token_id\""}},
  };
  for (const Case& k : cases) {
    FixtureCopy copy;
    copy.edit_config(k.edit);
    const std::string message = load_error(copy.path());
    SCOPED_TRACE(message);
    expect_names(message, {copy.file("config.json")});
    for (const std::string& name : k.names) expect_names(message, {name});
  }
  FixtureCopy broken;
  write_bytes(broken.file("config.json"), "{\"model_type\": \"gpt2\",");
  expect_names(load_error(broken.path()), {broken.file("config.json"), "not valid JSON"});
  FixtureCopy deep;
  write_bytes(deep.file("config.json"), std::string(100000, '[') + std::string(100000, ']'));
  expect_names(load_error(deep.path()), {deep.file("config.json"), "deeper"});
  FixtureCopy generation;  // kept for the save, so it must be a JSON object
  write_bytes(generation.file("generation_config.json"), "[1, 2]");
  expect_names(load_error(generation.path()), {generation.file("generation_config.json"), "not a JSON object"});
}

TEST(HFGPT2, RefusesMissingMisshapedAndUnexpectedTensors) {
  {
    FixtureCopy copy;
    write_model(copy.path(), without(fixture_tensors(), "transformer.h.1.mlp.c_fc.bias"));
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "missing tensor \"transformer.h.1.mlp.c_fc.bias\""});
  }
  {
    FixtureCopy copy;  // a config of more layers than the file holds
    copy.edit_config([](json& c) { c["n_layer"] = 3; });
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "\"transformer.h.2.attn.c_attn.weight\""});
  }
  {
    FixtureCopy copy;  // c_attn stored in Linear's layout instead of Conv1D's
    NamedArrays<float> tensors = fixture_tensors();
    Array<float>& w = tensor(tensors, "transformer.h.0.attn.c_attn.weight");
    w = Array<float>(xt::transpose(w));
    write_model(copy.path(), tensors);
    expect_names(load_error(copy.path()),
                 {copy.file("model.safetensors"), "\"transformer.h.0.attn.c_attn.weight\"", "(192, 64)", "(64, 192)"});
  }
  {
    FixtureCopy copy;
    NamedArrays<float> tensors = fixture_tensors();
    tensors.emplace_back("transformer.h.0.attn.q_norm.weight", Array<float>::from_shape({64}));
    write_model(copy.path(), tensors);
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "unexpected tensor \"transformer.h.0.attn.q_norm.weight\""});
  }
  {
    FixtureCopy copy;  // a mask buffer of a layer the config does not have
    NamedArrays<float> tensors = fixture_tensors();
    tensors.emplace_back("transformer.h.2.attn.bias", Array<float>::from_shape({1}));
    write_model(copy.path(), tensors);
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "\"transformer.h.2.attn.bias\""});
  }
  {
    FixtureCopy copy;  // an untied head
    NamedArrays<float> tensors = fixture_tensors();
    Array<float> head = tensor(tensors, "transformer.wte.weight");
    head(3, 4) += 1.0f;
    tensors.emplace_back("lm_head.weight", head);
    write_model(copy.path(), tensors);
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "\"lm_head.weight\"", "differs"});
  }
  {
    FixtureCopy copy;  // integers where floats belong
    std::vector<RawTensor> raw;
    for (const auto& [name, value] : fixture_tensors()) raw.push_back(encode(name, value, "F32"));
    raw[0].dtype = "I32";
    write_bytes(copy.file("model.safetensors"), safetensors_file(raw));
    expect_names(load_error(copy.path()), {copy.file("model.safetensors"), "\"" + raw[0].name + "\"", "I32"});
  }
}

TEST(HFGPT2, RefusesBadShardsAndIndexes) {
  // A sharded copy of the fixture: the first 10 tensors in one shard, the rest in another.
  const auto sharded = [](FixtureCopy& copy, json* map_out = nullptr) {
    fs::remove(copy.file("model.safetensors"));
    const NamedArrays<float> tensors = fixture_tensors();
    NamedArrays<float> a(tensors.begin(), tensors.begin() + 10), b(tensors.begin() + 10, tensors.end());
    save_safetensors(a, copy.file("model-00001-of-00002.safetensors"), {{"format", "pt"}});
    save_safetensors(b, copy.file("model-00002-of-00002.safetensors"), {{"format", "pt"}});
    json map = json::object();
    for (const auto& [name, v] : a) map[name] = "model-00001-of-00002.safetensors";
    for (const auto& [name, v] : b) map[name] = "model-00002-of-00002.safetensors";
    write_json(copy.file("model.safetensors.index.json"), {{"metadata", json::object()}, {"weight_map", map}});
    if (map_out) *map_out = map;
    return b.back().first;  // the last tensor of the second shard
  };
  {
    FixtureCopy copy;
    sharded(copy);
    auto model = models::load_hf_gpt2<float>(copy.path());  // the good one loads
    EXPECT_LE(max_error_against_fixture(*model), 1e-5);
  }
  {
    FixtureCopy copy;  // truncated: the second shard lost its last bytes
    const std::string last = sharded(copy);
    const std::string shard = copy.file("model-00002-of-00002.safetensors");
    const std::string bytes = read_bytes(shard);
    write_bytes(shard, bytes.substr(0, bytes.size() - 100));
    expect_names(load_error(copy.path()), {shard, "truncated", "\"" + last + "\""});
  }
  {
    FixtureCopy copy;  // the index names a shard that is not there
    json map;
    sharded(copy, &map);
    map["transformer.ln_f.bias"] = "model-00003-of-00003.safetensors";
    write_json(copy.file("model.safetensors.index.json"), {{"weight_map", map}});
    expect_names(load_error(copy.path()), {copy.file("model.safetensors.index.json"), "\"transformer.ln_f.bias\"",
                                           "model-00003-of-00003.safetensors"});
  }
  {
    FixtureCopy copy;  // the index places a tensor in the wrong shard
    json map;
    sharded(copy, &map);
    map["transformer.ln_f.bias"] = "model-00001-of-00002.safetensors";
    write_json(copy.file("model.safetensors.index.json"), {{"weight_map", map}});
    expect_names(load_error(copy.path()), {"model-0000", "\"transformer.ln_f.bias\"", "weight_map"});
  }
  {
    FixtureCopy copy;  // a file outside the folder
    json map;
    sharded(copy, &map);
    map["transformer.ln_f.bias"] = "../model-00002-of-00002.safetensors";
    write_json(copy.file("model.safetensors.index.json"), {{"weight_map", map}});
    expect_names(load_error(copy.path()), {copy.file("model.safetensors.index.json"), "\"transformer.ln_f.bias\"",
                                           "not a file name in the folder"});
  }
  {
    FixtureCopy copy;  // the index lacks a tensor
    json map;
    sharded(copy, &map);
    map.erase("transformer.wpe.weight");
    write_json(copy.file("model.safetensors.index.json"), {{"weight_map", map}});
    expect_names(load_error(copy.path()), {"\"transformer.wpe.weight\""});
  }
  {
    FixtureCopy copy;
    sharded(copy);
    write_json(copy.file("model.safetensors.index.json"), {{"weight_map", json::array()}});
    expect_names(load_error(copy.path()), {copy.file("model.safetensors.index.json"), "\"weight_map\""});
  }
}
