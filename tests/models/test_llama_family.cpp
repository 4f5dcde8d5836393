// The Llama family's other members against their reference folders (tests/fixtures/hf-qwen2-tiny:
// q/k/v biases, tied embeddings, Qwen2's window keys with use_sliding_window false;
// hf-mistral-tiny: head_dim unlike hidden / heads, a sliding_window longer than every input),
// whose numbers come from scripts/llama_ref.py: the logits within 1e-5 in float and 1e-9 in
// double, the 30 greedy tokens with and without the cache on both attention paths; a reached
// window refused by name. Half-precision folders (hf-qwen2-tiny/bf16 in transformers 5.x's keys,
// hf-mistral-tiny/f16 in 4.x's) load converted and save back byte for byte; a wrong dtype, a
// misshaped or missing tensor, an unimplemented option each refused naming the file and the key;
// a failed save leaves the folder as it was. A tied folder that also stores lm_head.weight, with
// the rotary inv_freq buffers of older transformers, is saved back with those keys, byte for byte.
#include "llama_fixture.hpp"
#include "serialize_util.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/models/hf_llama.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::testing::llama_fixture;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* const kQwen2 = "hf-qwen2-tiny";
const char* const kMistral = "hf-mistral-tiny";

// A copy of fixture `name` in `out`, its config.json edited by `edit`.
void copy_folder(const std::string& name, const TempDir& out, const std::function<void(json&)>& edit = {}) {
  json config = json::parse(read_bytes(dir(name) + "/config.json"));
  if (edit) edit(config);
  write_bytes(out.file("config.json"), config.dump(2));
  for (const char* file : {"generation_config.json", "model.safetensors"})
    fs::copy_file(dir(name) + "/" + file, out.file(file));
}

void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
}

// Loads the folder `from`, saves it and checks that it comes back as it was: the weights byte for
// byte, config.json and generation_config.json key for key.
template <class T>
void expect_saved_as_loaded(const std::string& from) {
  auto model = models::load_hf_llama<T>(from);
  TempDir out;
  models::save_hf_llama(*model, out.path());
  EXPECT_TRUE(read_bytes(out.file("model.safetensors")) == read_bytes(from + "/model.safetensors")) << from;
  for (const char* file : {"config.json", "generation_config.json"})
    EXPECT_EQ(json::parse(read_bytes(out.file(file))), json::parse(read_bytes(from + "/" + file)))
        << from << "/" << file;
}

// A copy of the tied fixture `name` whose model.safetensors also has what some transformers versions
// write beside the weights: lm_head.weight (the embedding's values) and, as before 4.31, each
// layer's rotary_emb.inv_freq buffer (1 / theta^(2i / d) in double, rounded to the folder's dtype:
// not necessarily the bits xgrad computes in float). Every tensor in the folder's dtype, by name.
void copy_with_head_and_rotary_buffers(const std::string& name, const TempDir& out) {
  copy_folder(name, out);
  const models::LlamaConfig config = models::load_llama_config(out.path());
  NamedArrays<double> tensors = load_safetensors<double>(out.file("model.safetensors"));
  for (const auto& [key, value] : NamedArrays<double>(tensors))
    if (key == "model.embed_tokens.weight") tensors.emplace_back("lm_head.weight", value);
  const auto half = static_cast<std::size_t>(config.head_dim / 2);
  Array<double> inv_freq = empty_array<double>({half});
  for (std::size_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(config.rope_theta, static_cast<double>(2 * i) / static_cast<double>(config.head_dim));
  for (std::int64_t layer = 0; layer < config.num_hidden_layers; ++layer)
    tensors.emplace_back("model.layers." + std::to_string(layer) + ".self_attn.rotary_emb.inv_freq", inv_freq);
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::string dtype = read_hf_weights(dir(name)).tensors.at("model.norm.weight").entry.dtype;
  SafetensorsDtypes dtypes;
  for (const auto& [key, value] : tensors) dtypes[key] = dtype;
  write_bytes(out.file("model.safetensors"), safetensors_bytes(tensors, {{"format", "pt"}}, dtypes));
}

// Each tensor's dtype and shape in dir's weights, by name.
std::map<std::string, std::pair<std::string, Shape>> tensor_listing(const std::string& dir) {
  std::map<std::string, std::pair<std::string, Shape>> listing;
  for (const auto& [key, where] : read_hf_weights(dir).tensors) listing[key] = {where.entry.dtype, where.entry.shape};
  return listing;
}

}  // namespace

TEST(LlamaFamily, Qwen2LogitsAndGreedyTokens) {
  auto model = models::load_hf_llama<float>(dir(kQwen2));
  EXPECT_LT(max_logit_error(*model, expected(kQwen2), "logits_float32"), 1e-5);
  expect_greedy_on_both_paths(*model, expected(kQwen2));
  auto exact = models::load_hf_llama<double>(dir(kQwen2));
  EXPECT_LT(max_logit_error(*exact, expected(kQwen2), "logits_float64"), 1e-9);
}

TEST(LlamaFamily, Qwen2HasQKVBiasesNoOProjBiasAndATiedHead) {
  auto model = models::load_hf_llama<float>(dir(kQwen2));
  const auto keys = model->state_dict().keys();
  const auto has = [&](const std::string& k) { return std::find(keys.begin(), keys.end(), k) != keys.end(); };
  EXPECT_TRUE(has("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_TRUE(has("model.layers.1.self_attn.v_proj.bias"));
  EXPECT_FALSE(has("model.layers.0.self_attn.o_proj.bias"));
  EXPECT_FALSE(has("model.layers.0.mlp.up_proj.bias"));
  EXPECT_EQ(model->lm_head, nullptr);
  EXPECT_FALSE(model->config().sliding_window);  // use_sliding_window: false
  EXPECT_EQ(keys.size(), load_safetensors<float>(dir(kQwen2) + "/model.safetensors").size());
}

TEST(LlamaFamily, MistralLogitsAndGreedyTokens) {
  auto model = models::load_hf_llama<float>(dir(kMistral));
  EXPECT_EQ(model->config().sliding_window, 48);
  EXPECT_LT(max_logit_error(*model, expected(kMistral), "logits_float32"), 1e-5);
  expect_greedy_on_both_paths(*model, expected(kMistral));
  auto exact = models::load_hf_llama<double>(dir(kMistral));
  EXPECT_LT(max_logit_error(*exact, expected(kMistral), "logits_float64"), 1e-9);
}

TEST(LlamaFamily, MistralWithoutAWindowGivesTheSameNumbers) {
  TempDir copy;
  copy_folder(kMistral, copy, [](json& c) { c["sliding_window"] = nullptr; });
  auto model = models::load_hf_llama<double>(copy.path());
  EXPECT_FALSE(model->config().sliding_window);
  EXPECT_LT(max_logit_error(*model, expected(kMistral), "logits_float64"), 1e-9);
}

TEST(LlamaFamily, AReachedSlidingWindowIsRefusedByName) {
  TempDir copy;
  copy_folder(kMistral, copy, [](json& c) { c["sliding_window"] = 8; });
  auto model = models::load_hf_llama<float>(copy.path());
  NoGradGuard no_grad;
  expect_mentions(error_of([&] { model->forward(row(expected(kMistral)["input_ids"][0])); }),
                  {"sliding window", "(8)", "9 positions"});
  SamplingOptions greedy_options;
  greedy_options.greedy = true;
  expect_mentions(error_of([&] { model->generate(row(expected(kMistral)["greedy_prompt"]), 30, greedy_options); }),
                  {"sliding window", "(8)"});
}

TEST(LlamaFamily, HalfPrecisionFoldersLoadConverted) {
  for (const std::string& name : {std::string(kQwen2) + "/bf16", std::string(kMistral) + "/f16"}) {
    auto model = models::load_hf_llama<float>(dir(name));
    EXPECT_LT(max_logit_error(*model, expected(name), "logits_float32"), 1e-5) << name;
    auto exact = models::load_hf_llama<double>(dir(name));
    EXPECT_LT(max_logit_error(*exact, expected(name), "logits_float64"), 1e-9) << name;
  }
}

// The folder's dtypes, keys and spelling come back: BF16 with 5.x's dtype and rope_parameters, F16
// with 4.x's torch_dtype and rope_theta, F32.
TEST(LlamaFamily, SavingWritesTheFoldersDtypesBackByteForByte) {
  expect_saved_as_loaded<float>(dir(std::string(kQwen2) + "/bf16"));
  expect_saved_as_loaded<double>(dir(std::string(kQwen2) + "/bf16"));
  expect_saved_as_loaded<float>(dir(std::string(kMistral) + "/f16"));
  expect_saved_as_loaded<float>(dir(kQwen2));
  expect_saved_as_loaded<double>(dir(kMistral));
}

// A tied folder that also stores lm_head.weight, and one with the rotary buffers of older
// transformers: both load (the head equal to the embedding, the buffers not read) and are saved
// back with the same keys, byte for byte, in F32 and BF16.
TEST(LlamaFamily, SavingWritesATiedHeadAndTheRotaryBuffersBack) {
  for (const std::string& name : {std::string(kQwen2), std::string(kQwen2) + "/bf16"}) {
    TempDir copy;
    copy_with_head_and_rotary_buffers(name, copy);
    EXPECT_EQ(tensor_listing(copy.path()).count("lm_head.weight"), 1u);
    EXPECT_EQ(tensor_listing(copy.path()).count("model.layers.1.self_attn.rotary_emb.inv_freq"), 1u);
    expect_saved_as_loaded<float>(copy.path());
    expect_saved_as_loaded<double>(copy.path());
    auto model = models::load_hf_llama<float>(copy.path());  // the same model as without them
    EXPECT_LT(max_logit_error(*model, expected(name), "logits_float32"), 1e-5) << name;
  }
}

// A model built from the folder's config.json with its weights' dtypes (finetune_llm --random-init)
// writes the folder's keys too: the head from the embedding, the buffers from the config.
TEST(LlamaFamily, AModelBuiltWithTheFoldersDtypesWritesItsKeys) {
  TempDir copy;
  copy_with_head_and_rotary_buffers(std::string(kQwen2) + "/bf16", copy);
  models::LlamaConfig config = models::load_llama_config(copy.path());
  for (const auto& [key, where] : read_hf_weights(copy.path()).tensors) config.weight_dtypes[key] = where.entry.dtype;
  models::LlamaForCausalLM<float> model(config);
  TempDir out;
  models::save_hf_llama(model, out.path());
  EXPECT_EQ(tensor_listing(out.path()), tensor_listing(copy.path()));
  const auto tensors = load_safetensors<float>(out.file("model.safetensors"));
  const std::map<std::string, Array<float>> saved(tensors.begin(), tensors.end());
  ASSERT_EQ(saved.count("lm_head.weight") + saved.count("model.layers.0.self_attn.rotary_emb.inv_freq"), 2u);
  EXPECT_TRUE(saved.at("lm_head.weight") == saved.at("model.embed_tokens.weight"));
  const Array<float>& inv_freq = saved.at("model.layers.0.self_attn.rotary_emb.inv_freq");
  EXPECT_NEAR(inv_freq[1], 1.0 / std::pow(1e6, 2.0 / 8.0), 1e-2 / std::pow(1e6, 2.0 / 8.0));  // BF16's rounding
}

TEST(LlamaFamily, AMisshapedRotaryBufferIsRefusedByName) {
  TempDir copy;
  copy_folder(kQwen2, copy);
  auto tensors = load_safetensors<float>(copy.file("model.safetensors"));
  tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", full_array<float>(Shape{8}, 1.0f, "test"));
  save_safetensors(tensors, copy.file("model.safetensors"));
  expect_mentions(error_of([&] { models::load_hf_llama<float>(copy.path()); }),
                  {"model.safetensors", "model.layers.0.self_attn.rotary_emb.inv_freq", "(4)", "(8)"});
}

TEST(LlamaFamily, AWrongDtypeIsRefusedNamingTheFileAndTheTensor) {
  TempDir copy;
  copy_folder(kQwen2, copy);
  std::string bytes = read_bytes(copy.file("model.safetensors"));
  const std::string entry = "\"model.norm.weight\":{\"dtype\":\"F32\"";
  const std::size_t at = bytes.find(entry);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, entry.size(), "\"model.norm.weight\":{\"dtype\":\"I32\"");  // same size: a valid file
  write_bytes(copy.file("model.safetensors"), bytes);
  expect_mentions(error_of([&] { models::load_hf_llama<float>(copy.path()); }),
                  {"model.safetensors", "model.norm.weight", "I32"});
}

TEST(LlamaFamily, AMissingOrMisshapedBiasIsRefusedByName) {
  auto tensors = load_safetensors<float>(dir(kQwen2) + "/model.safetensors");
  const auto write = [&](const TempDir& out, const NamedArrays<float>& t) {
    copy_folder(kQwen2, out);
    save_safetensors(t, out.file("model.safetensors"));
  };
  {
    TempDir out;
    auto missing = tensors;
    missing.erase(std::find_if(missing.begin(), missing.end(),
                               [](const auto& t) { return t.first == "model.layers.1.self_attn.k_proj.bias"; }));
    write(out, missing);
    expect_mentions(error_of([&] { models::load_hf_llama<float>(out.path()); }),
                    {"model.safetensors", "model.layers.1.self_attn.k_proj.bias", "(16)"});
  }
  {
    TempDir out;
    auto misshaped = tensors;
    for (auto& [name, value] : misshaped)
      if (name == "model.layers.0.self_attn.q_proj.bias") value = full_array<float>(Shape{16}, 0.0f, "test");
    write(out, misshaped);
    expect_mentions(error_of([&] { models::load_hf_llama<float>(out.path()); }),
                    {"model.safetensors", "model.layers.0.self_attn.q_proj.bias", "(32)", "(16)"});
  }
}

TEST(LlamaFamily, AnUnimplementedOptionIsRefusedNamingTheFileAndTheKey) {
  const std::pair<std::function<void(json&)>, std::vector<std::string>> cases[] = {
      {[](json& c) { c["use_qk_norm"] = true; }, {"config.json", "use_qk_norm", "RMSNorm on the queries"}},
      {[](json& c) {
         c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
       },
       {"config.json", "yarn"}},
      {[](json& c) { c["attention_bias"] = true; }, {"config.json", "attention_bias", "q/k/v_proj always"}},
      {[](json& c) { c["hidden_act"] = "gelu"; }, {"config.json", "hidden_act", "silu"}},
  };
  for (const auto& [edit, parts] : cases) {
    TempDir copy;
    copy_folder(kQwen2, copy, edit);
    expect_mentions(error_of([&] { models::load_hf_llama<float>(copy.path()); }), parts);
  }
}

// A save that fails (here: generation_config.json is a folder) writes none of the three files.
TEST(LlamaFamily, AFailedSaveLeavesTheFolderAsItWas) {
  auto model = models::load_hf_llama<float>(dir(kQwen2));
  TempDir out;
  write_bytes(out.file("config.json"), "old");
  fs::create_directory(out.file("generation_config.json"));
  expect_mentions(error_of([&] { models::save_hf_llama(*model, out.path()); }), {"generation_config.json"});
  EXPECT_EQ(read_bytes(out.file("config.json")), "old");
  EXPECT_FALSE(fs::exists(out.file("model.safetensors")));
  EXPECT_TRUE(fs::is_directory(out.file("generation_config.json")));
}

// One check of the config's consistency: the model built in code refuses what config.json's reader
// refuses, with the same words.
TEST(LlamaFamily, TheModelAndTheReaderShareOneConfigCheck) {
  models::LlamaConfig c = models::load_llama_config(dir(kMistral));
  c.num_key_value_heads = 3;
  const std::string from_code = error_of([&] { models::LlamaForCausalLM<double> model(c); });
  expect_mentions(from_code, {"LlamaConfig: \"num_key_value_heads\" (3) must divide \"num_attention_heads\" (4)"});
  TempDir copy;
  copy_folder(kMistral, copy, [](json& j) { j["num_key_value_heads"] = 3; });
  expect_mentions(error_of([&] { models::load_llama_config(copy.path()); }),
                  {"config.json", "\"num_key_value_heads\" (3) must divide \"num_attention_heads\" (4)"});
  c = models::load_llama_config(dir(kMistral));
  c.head_dim = 0;
  expect_mentions(error_of([&] { models::LlamaForCausalLM<double> model(c); }), {"\"head_dim\" is 0"});
  c.head_dim = 15;
  expect_mentions(error_of([&] { models::LlamaForCausalLM<double> model(c); }), {"= 15 dims per head", "even"});
}
