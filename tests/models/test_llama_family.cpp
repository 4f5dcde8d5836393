// The Llama family's other members against their reference folders (tests/fixtures/hf-qwen2-tiny:
// q/k/v biases, tied embeddings, Qwen2's window keys with use_sliding_window false;
// hf-mistral-tiny: head_dim unlike hidden / heads, a sliding_window longer than every input),
// whose numbers come from scripts/llama_ref.py: the logits within 1e-5 in float and 1e-9 in
// double, the 30 greedy tokens with and without the cache on both attention paths; a reached
// window refused by name. Half-precision folders (hf-qwen2-tiny/bf16 in transformers 5.x's keys,
// hf-mistral-tiny/f16 in 4.x's) load converted and save back byte for byte; a wrong dtype, a
// misshaped or missing tensor, an unimplemented option each refused naming the file and the key;
// a failed save leaves the folder as it was.
#include "llama_fixture.hpp"
#include "serialize_util.hpp"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/models/hf_llama.hpp>
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

// Loads `name`, saves it and checks that the folder comes back as it was: the weights byte for
// byte, config.json and generation_config.json key for key.
template <class T>
void expect_saved_as_loaded(const std::string& name) {
  auto model = models::load_hf_llama<T>(dir(name));
  TempDir out;
  models::save_hf_llama(*model, out.path());
  EXPECT_TRUE(read_bytes(out.file("model.safetensors")) == read_bytes(dir(name) + "/model.safetensors")) << name;
  for (const char* file : {"config.json", "generation_config.json"})
    EXPECT_EQ(json::parse(read_bytes(out.file(file))), json::parse(read_bytes(dir(name) + "/" + file)))
        << name << "/" << file;
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
  expect_saved_as_loaded<float>(std::string(kQwen2) + "/bf16");
  expect_saved_as_loaded<double>(std::string(kQwen2) + "/bf16");
  expect_saved_as_loaded<float>(std::string(kMistral) + "/f16");
  expect_saved_as_loaded<float>(kQwen2);
  expect_saved_as_loaded<double>(kMistral);
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
