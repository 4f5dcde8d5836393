// models::LlamaConfig against tests/fixtures/hf-llama-tiny (a LlamaConfig as transformers 4.46 writes
// it): every field, the round trip to the same JSON, transformers 5.x's spelling, the defaults of
// qwen2 and mistral, every refusal naming the key and the value; and the folder's weights through
// serialize/hf_folder (one file, and the same tensors split into two shards).
#include "serialize_util.hpp"

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/models/llama_config.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;
using models::LlamaConfig;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURES_DIR) + "/hf-llama-tiny";

json fixture_json() { return json::parse(read_bytes(kFixture + "/config.json")); }

// The fixture's config.json edited.
json edited(const std::function<void(json&)>& edit) {
  json j = fixture_json();
  edit(j);
  return j;
}

LlamaConfig parse(const json& j) { return models::parse_llama_config(j, "variant.json"); }

// Expects parsing `j` to throw FormatError naming every fragment.
void expect_refused(const json& j, std::initializer_list<std::string> fragments) {
  expect_error<FormatError>([&] { parse(j); }, fragments);
}

}  // namespace

// ---- the fixture ---------------------------------------------------------------------------------

TEST(LlamaConfig, ReadsTheFixture) {
  const LlamaConfig c = models::load_llama_config(kFixture);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 320);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias());
  EXPECT_FALSE(c.o_proj_bias());
  EXPECT_FALSE(c.mlp_has_bias());
  EXPECT_EQ(c.bos_token_id, std::optional<std::int64_t>(1));
  EXPECT_EQ(c.eos_token_id, std::vector<std::int64_t>{2});
  EXPECT_FALSE(c.pad_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_FALSE(c.sliding_window.has_value());
  ASSERT_TRUE(c.generation_config.has_value());
  EXPECT_EQ(c.generation_config->bos_token_id, std::optional<std::int64_t>(1));
  EXPECT_EQ(c.generation_config->eos_token_id, std::vector<std::int64_t>{2});
  EXPECT_EQ(c.generation_config->json, json::parse(read_bytes(kFixture + "/generation_config.json")));
}

TEST(LlamaConfig, WritesBackTheFileItCameFrom) {
  const LlamaConfig c = models::load_llama_config(kFixture);
  EXPECT_EQ(c.to_json(), fixture_json());
  // The bytes too: save_pretrained's json.dumps(indent=2, sort_keys=True) and a newline.
  EXPECT_EQ(c.to_json().dump(2) + "\n", read_bytes(kFixture + "/config.json"));
}

TEST(LlamaConfig, WritesOnlyTheFieldsThatChanged) {
  LlamaConfig c = models::load_llama_config(kFixture);
  c.num_key_value_heads = 4;
  c.rope_theta = 500000.0;
  c.eos_token_id = {2, 7};
  c.rope_scaling.rope_type = "linear";
  c.rope_scaling.factor = 2.0;
  json expected = fixture_json();
  expected["num_key_value_heads"] = 4;
  expected["rope_theta"] = 500000.0;
  expected["eos_token_id"] = {2, 7};
  expected["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(c.to_json(), expected);
  EXPECT_EQ(parse(c.to_json()), c);
}

TEST(LlamaConfig, ConfigsBuiltInCodeReadBack) {
  for (const char* type : {"llama", "qwen2", "mistral"}) {
    LlamaConfig c;
    c.model_type = type;
    c.hidden_size = 96;
    c.num_attention_heads = 6;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.sliding_window.reset();
    if (std::string(type) == "llama") c.attention_bias = true;
    const json j = c.to_json();
    EXPECT_EQ(parse(j), c) << type << ": " << j.dump();
    EXPECT_EQ(j.at("architectures").at(0), std::string(type) == "qwen2"     ? "Qwen2ForCausalLM"
                                           : std::string(type) == "mistral" ? "MistralForCausalLM"
                                                                            : "LlamaForCausalLM");
  }
  LlamaConfig retyped = models::load_llama_config(kFixture);  // another model_type: every key
  retyped.model_type = "mistral";
  EXPECT_EQ(parse(retyped.to_json()), retyped);
  EXPECT_EQ(retyped.to_json().at("architectures"), json({"MistralForCausalLM"}));
  EXPECT_EQ(retyped.to_json().at("transformers_version"), "4.46.3");  // the other keys stay
  LlamaConfig windowed;
  windowed.model_type = "mistral";
  windowed.sliding_window = 256;
  EXPECT_EQ(parse(windowed.to_json()).sliding_window, std::optional<std::int64_t>(256));
  windowed.model_type = "qwen2";
  EXPECT_EQ(parse(windowed.to_json()).sliding_window, std::optional<std::int64_t>(256));
  windowed.model_type = "llama";  // LlamaConfig has no window: it would read back without one
  expect_error<std::invalid_argument>([&] { windowed.to_json(); }, {"LlamaConfig::to_json", "read back"});
}

// ---- transformers 5.x's spelling -----------------------------------------------------------------

TEST(LlamaConfig, ReadsTransformers5RopeParametersAndDtype) {
  const json v5 = edited([](json& j) {
    j.erase("rope_theta");
    j.erase("rope_scaling");
    j.erase("torch_dtype");
    j["dtype"] = "bfloat16";
    j["rope_parameters"] = {{"rope_theta", 10000.0}, {"rope_type", "default"}};
    j["transformers_version"] = "5.0.0";
  });
  LlamaConfig c = parse(v5);
  LlamaConfig v4 = models::load_llama_config(kFixture);
  v4.torch_dtype = "bfloat16";
  EXPECT_EQ(c, v4);
  EXPECT_EQ(c.to_json(), v5);
  // A change is written in 5.x's spelling.
  c.rope_theta = 1e6;
  c.rope_scaling = models::RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192};
  c.torch_dtype = "float32";
  json expected = v5;
  expected["rope_parameters"] = {{"rope_theta", 1e6},       {"rope_type", "llama3"},
                                 {"factor", 8.0},           {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  expected["dtype"] = "float32";
  EXPECT_EQ(c.to_json(), expected);
  EXPECT_EQ(parse(c.to_json()), c);
}

TEST(LlamaConfig, ReadsRopeScalingVariants) {
  const LlamaConfig linear = parse(edited([](json& j) { j["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}}; }));
  EXPECT_EQ(linear.rope_scaling.rope_type, "linear");
  EXPECT_EQ(linear.rope_scaling.factor, 4.0);
  const LlamaConfig llama3 = parse(edited([](json& j) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  }));
  EXPECT_EQ(llama3.rope_scaling, (models::RopeScaling{"llama3", 32.0, 1.0, 4.0, 8192}));
  EXPECT_EQ(llama3.to_json(), llama3.source);
  EXPECT_EQ(parse(edited([](json& j) {
              j["rope_scaling"] = {{"rope_type", "default"}};
            })).rope_scaling.rope_type,
            "default");
  EXPECT_EQ(parse(edited([](json& j) { j["partial_rotary_factor"] = 0.5; })).rotary_dim(), 8);
}

// ---- sizes ---------------------------------------------------------------------------------------

TEST(LlamaConfig, HeadDimExplicitOrDerived) {
  EXPECT_EQ(parse(edited([](json& j) { j["head_dim"] = 32; })).head_dim, 32);   // o_proj takes 4 * 32 = 128
  EXPECT_EQ(parse(edited([](json& j) { j.erase("head_dim"); })).head_dim, 16);  // 64 / 4
  EXPECT_EQ(parse(edited([](json& j) { j["head_dim"] = nullptr; })).head_dim, 16);
  expect_refused(edited([](json& j) {
                   j.erase("head_dim");
                   j["hidden_size"] = 66;
                 }),
                 {"variant.json", "\"hidden_size\" (66)", "\"num_attention_heads\" (4)", "head_dim"});
  expect_refused(edited([](json& j) { j["head_dim"] = 15; }), {"head_dim * partial_rotary_factor = 15", "even"});
  expect_refused(edited([](json& j) { j["partial_rotary_factor"] = 0.1; }), {"= 1 dims", "even"});
}

TEST(LlamaConfig, GroupedQueryAttentionDivides) {
  expect_refused(edited([](json& j) { j["num_key_value_heads"] = 3; }),
                 {"variant.json", "\"num_key_value_heads\" (3)", "\"num_attention_heads\" (4)"});
  expect_refused(edited([](json& j) { j["num_key_value_heads"] = 8; }), {"\"num_key_value_heads\" (8)"});
  EXPECT_EQ(parse(edited([](json& j) { j.erase("num_key_value_heads"); })).num_key_value_heads, 4);
  EXPECT_EQ(parse(edited([](json& j) { j["num_key_value_heads"] = nullptr; })).num_key_value_heads, 4);
  EXPECT_EQ(parse(edited([](json& j) { j["num_key_value_heads"] = 1; })).num_key_value_heads, 1);
  expect_refused(edited([](json& j) { j["vocab_size"] = 1e99; }), {"vocab_size", "an integer in [1, 2147483647]"});
  expect_refused(edited([](json& j) { j["num_hidden_layers"] = 0; }), {"num_hidden_layers"});
}

// ---- the family ----------------------------------------------------------------------------------

TEST(LlamaConfig, Qwen2HasQkvBiasesAndItsDefaults) {
  const json qwen = {{"model_type", "qwen2"},    {"hidden_size", 64},       {"num_attention_heads", 4},
                     {"num_key_value_heads", 2}, {"num_hidden_layers", 2},  {"use_sliding_window", false},
                     {"sliding_window", 32768},  {"max_window_layers", 21}, {"tie_word_embeddings", true},
                     {"eos_token_id", 151643}};
  const LlamaConfig c = parse(qwen);
  EXPECT_TRUE(c.qkv_bias());
  EXPECT_FALSE(c.o_proj_bias());
  EXPECT_FALSE(c.mlp_has_bias());
  EXPECT_EQ(c.vocab_size, 151936);  // Qwen2Config's defaults
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window false
  json windowed = qwen;
  windowed["use_sliding_window"] = true;
  windowed["max_window_layers"] = 1;  // layer 1 uses the window
  EXPECT_EQ(parse(windowed).sliding_window, std::optional<std::int64_t>(32768));
  windowed["max_window_layers"] = 2;  // no layer does
  EXPECT_FALSE(parse(windowed).sliding_window.has_value());
  windowed["layer_types"] = {"full_attention", "sliding_attention"};
  EXPECT_EQ(parse(windowed).sliding_window, std::optional<std::int64_t>(32768));
  windowed["layer_types"] = {"full_attention", "chunked_attention"};
  expect_error<FormatError>([&] { parse(windowed); }, {"layer_types[1]", "\"chunked_attention\""});
  json no_kv = qwen;  // Qwen2Config's num_key_value_heads is 32, not num_attention_heads
  no_kv.erase("num_key_value_heads");
  no_kv["num_attention_heads"] = 64;
  no_kv["head_dim"] = 16;
  EXPECT_EQ(parse(no_kv).num_key_value_heads, 32);
  json biased = qwen;
  biased["attention_bias"] = true;
  expect_error<FormatError>([&] { parse(biased); }, {"attention_bias", "qwen2", "o_proj"});
}

TEST(LlamaConfig, MistralWindowAndDefaults) {
  const json mistral = {
      {"model_type", "mistral"}, {"hidden_size", 128}, {"num_attention_heads", 16}, {"num_hidden_layers", 2}};
  const LlamaConfig c = parse(mistral);
  EXPECT_EQ(c.num_key_value_heads, 8);  // MistralConfig's default, not num_attention_heads
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.sliding_window, std::optional<std::int64_t>(4096));  // MistralConfig's default
  json given = mistral;
  given["num_key_value_heads"] = 2;
  given["sliding_window"] = nullptr;
  EXPECT_FALSE(parse(given).sliding_window.has_value());
  given["sliding_window"] = 4096;
  EXPECT_EQ(parse(given).sliding_window, std::optional<std::int64_t>(4096));
  EXPECT_EQ(parse(given).to_json(), given);
}

TEST(LlamaConfig, EosTokenIdListsAndGenerationConfig) {
  const LlamaConfig c = parse(edited([](json& j) { j["eos_token_id"] = {128001, 128008, 128009}; }));
  EXPECT_EQ(c.eos_token_id, (std::vector<std::int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.to_json().at("eos_token_id"), json({128001, 128008, 128009}));
  EXPECT_TRUE(parse(edited([](json& j) { j["eos_token_id"] = nullptr; })).eos_token_id.empty());
  expect_refused(edited([](json& j) { j["eos_token_id"] = {1, "2"}; }), {"eos_token_id[1]"});
  expect_refused(edited([](json& j) { j["bos_token_id"] = -3; }), {"bos_token_id"});
  const json g = {{"bos_token_id", 1}, {"eos_token_id", {2, 3}}, {"do_sample", true}, {"temperature", 0.6}};
  const models::GenerationConfig gen = models::parse_generation_config(g, "generation_config.json");
  EXPECT_EQ(gen.eos_token_id, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(gen.json, g);
  expect_error<FormatError>([&] { models::parse_generation_config(json::array(), "g.json"); }, {"g.json", "object"});
}

TEST(LlamaConfig, AcceptsHarmlessKeys) {
  const LlamaConfig base = models::load_llama_config(kFixture);
  const json j = edited([](json& c) {
    c["_name_or_path"] = "HuggingFaceTB/SmolLM2-135M";
    c["architectures"] = {"LlamaForCausalLM"};
    c["initializer_range"] = 0.041666666666666664;
    c["use_cache"] = false;
    c["pretraining_tp"] = 1;
    c["attention_dropout"] = 0.0;
    c["transformers_version"] = "4.57.1";
    c["attn_logit_softcapping"] = nullptr;
  });
  EXPECT_EQ(parse(j), base);
  EXPECT_EQ(parse(j).to_json(), j);
}

TEST(LlamaConfig, RefusesWhatItDoesNotImplementByName) {
  const auto refused = [](const char* key, const json& value, std::initializer_list<std::string> fragments) {
    SCOPED_TRACE(key);
    expect_refused(edited([&](json& j) { j[key] = value; }), fragments);
  };
  refused("model_type", "gemma2", {"variant.json", "model_type", "\"gemma2\"", "llama"});
  refused("hidden_act", "gelu", {"hidden_act", "\"gelu\"", "silu"});
  refused("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, {"rope_scaling.rope_type", "\"yarn\""});
  refused("rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}, {"rope_scaling.type", "\"dynamic\""});
  refused("rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}, {"beta_fast", 32}},
          {"rope_scaling.beta_fast", "32"});
  refused("rope_scaling", {{"factor", 2.0}}, {"rope_scaling", "rope_type"});
  refused("rope_scaling", {{"rope_type", "linear"}}, {"rope_scaling.factor"});
  refused("rope_scaling",
          {{"rope_type", "llama3"},
           {"factor", 8.0},
           {"low_freq_factor", 4.0},
           {"high_freq_factor", 1.0},
           {"original_max_position_embeddings", 8192}},
          {"high_freq_factor", "low_freq_factor"});
  refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}, {"rope_scaling.low_freq_factor"});
  refused("attn_logit_softcapping", 50.0, {"attn_logit_softcapping", "50.0", "soft-capping"});
  refused("final_logit_softcapping", 30.0, {"final_logit_softcapping", "30.0"});
  refused("query_pre_attn_scalar", 256, {"query_pre_attn_scalar", "256"});
  refused("quantization_config", {{"quant_method", "gptq"}}, {"quantization_config", "quantized"});
  refused("num_local_experts", 8, {"num_local_experts", "8", "experts"});
  refused("pretraining_tp", 2, {"pretraining_tp", "2"});
  refused("attention_dropout", 0.1, {"attention_dropout", "0.1", "dropout"});
  refused("rope_interleaved", true, {"rope_interleaved", "true"});
  refused("torch_dtype", "int8", {"torch_dtype", "\"int8\""});
  refused("rms_norm_eps", -1.0, {"rms_norm_eps"});
  refused("tie_word_embeddings", "yes", {"tie_word_embeddings", "true or false"});
  expect_refused(edited([](json& j) { j.erase("model_type"); }), {"variant.json", "model_type"});
  expect_refused(json::array(), {"variant.json", "a JSON object"});
  expect_refused(edited([](json& j) {
                   j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
                   j["rope_parameters"] = {{"rope_theta", 10000.0}};
                 }),
                 {"rope_scaling", "rope_parameters"});
  expect_refused(edited([](json& j) {
                   j.erase("rope_scaling");
                   j["rope_parameters"] = {{"rope_theta", 10.0}};
                 }),
                 {"rope_theta", "differs"});
}

TEST(LlamaConfig, MissingConfigNamesTheFile) {
  TempDir empty;
  expect_error<std::runtime_error>([&] { models::load_llama_config(empty.path()); },
                                   {empty.file("config.json"), "does not exist"});
  write_bytes(empty.file("config.json"), "{\"model_type\": \"llama\", ");
  expect_error<FormatError>([&] { models::load_llama_config(empty.path()); }, {empty.file("config.json")});
  write_bytes(empty.file("config.json"), fixture_json().dump());
  write_bytes(empty.file("generation_config.json"), "[1]");
  expect_error<FormatError>([&] { models::load_llama_config(empty.path()); },
                            {empty.file("generation_config.json"), "object"});
}

// ---- the weights through serialize/hf_folder -------------------------------------------------------

namespace {

// The names and shapes the fixture's README lists.
std::map<std::string, Shape> fixture_shapes() {
  std::map<std::string, Shape> shapes = {
      {"model.embed_tokens.weight", {320, 64}}, {"lm_head.weight", {320, 64}}, {"model.norm.weight", {64}}};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    shapes[p + "self_attn.q_proj.weight"] = {64, 64};
    shapes[p + "self_attn.k_proj.weight"] = {32, 64};
    shapes[p + "self_attn.v_proj.weight"] = {32, 64};
    shapes[p + "self_attn.o_proj.weight"] = {64, 64};
    shapes[p + "mlp.gate_proj.weight"] = {160, 64};
    shapes[p + "mlp.up_proj.weight"] = {160, 64};
    shapes[p + "mlp.down_proj.weight"] = {64, 160};
    shapes[p + "input_layernorm.weight"] = {64};
    shapes[p + "post_attention_layernorm.weight"] = {64};
  }
  return shapes;
}

std::map<std::string, Shape> shapes_of(const HFWeights& w) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : w.tensors) shapes[name] = t.entry.shape;
  return shapes;
}

bool keep_all(const std::string&) { return true; }

void expect_fixture_tensors(const HFWeights& w) {
  EXPECT_EQ(w.tensors.size(), 21u);
  EXPECT_EQ(shapes_of(w), fixture_shapes());
  const auto loaded = load_hf_tensors<float>(w, keep_all);
  const auto stored = load_safetensors<float>(kFixture + "/model.safetensors");
  ASSERT_EQ(loaded.size(), stored.size());
  for (const auto& [name, array] : stored) EXPECT_TRUE(same_bits(array, loaded.at(name))) << name;
}

}  // namespace

TEST(HFWeights, ReadsTheFixturesSafetensors) {
  const HFWeights w = read_hf_weights(kFixture);
  EXPECT_EQ(w.listing, kFixture + "/model.safetensors");
  EXPECT_EQ(w.files, std::vector<std::string>{kFixture + "/model.safetensors"});
  expect_fixture_tensors(w);
  EXPECT_EQ(expect_hf_tensor(w, "model.norm.weight", {64}, "from config.json").entry.dtype, "F32");
  expect_error<FormatError>(
      [&] { expect_hf_tensor(w, "model.norm.bias", {64}, "from config.json", "load_x"); },
      {"load_x", w.listing, "missing tensor \"model.norm.bias\" (of shape (64) from config.json)"});
  expect_error<FormatError>(
      [&] {
        expect_hf_tensor(w, "lm_head.weight", {64, 320}, "for the model");
      },
      {"\"lm_head.weight\" has shape (320, 64), expected (64, 320) for the model"});
}

TEST(HFWeights, ReadsTheSameTensorsFromTwoShards) {
  TempDir dir;
  const auto stored = load_safetensors<float>(kFixture + "/model.safetensors");
  NamedArrays<float> first, second;
  json weight_map = json::object();
  for (const auto& [name, array] : stored) {
    const bool early = name.rfind("model.layers.1.", 0) != 0 && name != "model.norm.weight" && name != "lm_head.weight";
    (early ? first : second).emplace_back(name, array);
    weight_map[name] = early ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  save_safetensors(first, dir.file("model-00001-of-00002.safetensors"), {{"format", "pt"}});
  save_safetensors(second, dir.file("model-00002-of-00002.safetensors"), {{"format", "pt"}});
  write_bytes(dir.file("model.safetensors.index.json"),
              json{{"metadata", {{"total_size", 511040}}}, {"weight_map", weight_map}}.dump(2));
  ASSERT_TRUE(has_hf_weights(dir.path()));
  const HFWeights w = read_hf_weights(dir.path());
  EXPECT_EQ(w.listing, dir.file("model.safetensors.index.json"));
  EXPECT_EQ(w.files.size(), 2u);
  expect_fixture_tensors(w);
  // A shard without a tensor the index places in it.
  weight_map["model.extra.weight"] = "model-00002-of-00002.safetensors";
  write_bytes(dir.file("model.safetensors.index.json"), json{{"weight_map", weight_map}}.dump());
  expect_error<FormatError>([&] { read_hf_weights(dir.path(), "load_x"); },
                            {"load_x", "model-00002-of-00002.safetensors", "\"model.extra.weight\"", "weight_map"});
}

TEST(HFWeights, AFolderWithoutWeightsIsNamed) {
  TempDir empty;
  EXPECT_FALSE(has_hf_weights(empty.path()));
  expect_error<std::runtime_error>([&] { read_hf_weights(empty.path()); },
                                   {empty.path(), "neither model.safetensors nor model.safetensors.index.json"});
}
