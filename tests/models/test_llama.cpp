// models::LlamaForCausalLM and load_hf_llama / save_hf_llama against tests/fixtures/hf-llama-tiny (a
// random Llama with GQA and an untied head, with the logits and greedy tokens of a literal port of
// transformers' modeling_llama.py: see the README there): the logits of two inputs within 1e-5 in
// float and 1e-10 in double, the 30 greedy tokens with the KV cache, the cached forward equal to the
// full one, without the cache on both attention paths, save and reload bit for bit (the weights
// file byte for byte), a tied model, refusals naming the tensor, a
// double-precision gradcheck of a tiny random model's parameters, and the MLP's fused silu_mul.
#include "llama_fixture.hpp"
#include "serialize_util.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/backend/allocator.hpp>
#include <xgrad/core/gradcheck.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/profiler.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/models/llama.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using namespace xgrad::testing::llama_fixture;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = llama_fixture::dir("hf-llama-tiny");

const json& expected() { return llama_fixture::expected("hf-llama-tiny"); }

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 16;
  c.rms_norm_eps = 1e-6;
  return c;
}

}  // namespace

TEST(Llama, FixtureLogitsFloat32) {
  auto model = models::load_hf_llama<float>(kFixture);
  EXPECT_LT(max_logit_error(*model, expected(), "logits_float32"), 1e-5);
  EXPECT_LT(max_logit_error(*model, expected(), "logits_float64"), 2e-5);
}

TEST(Llama, FixtureLogitsFloat64) {
  auto model = models::load_hf_llama<double>(kFixture);
  EXPECT_LT(max_logit_error(*model, expected(), "logits_float64"), 1e-10);
}

TEST(Llama, FixtureGreedyTokensWithAndWithoutTheCacheOnBothAttentionPaths) {
  auto model = models::load_hf_llama<float>(kFixture);
  expect_greedy_on_both_paths(*model, expected());
}

TEST(Llama, CachedForwardEqualsTheFullForward) {
  auto model = models::load_hf_llama<double>(kFixture);
  model->eval();
  NoGradGuard no_grad;
  const IndexArray ids = row(expected()["input_ids"][1]);  // 12 tokens: 5 as a prefill, then one at a time
  const Array<double> full = model->forward(ids).value();
  std::vector<nn::KVCache<double>> caches;
  std::size_t start = 0;
  for (std::size_t len : {5, 1, 1, 2, 3}) {
    IndexArray part = empty_array<std::int64_t>(Shape{1, len});
    for (std::size_t j = 0; j < len; ++j) part(0, j) = ids(0, start + j);
    const Array<double> got = model->forward_cached(part, caches).value();
    for (std::size_t j = 0; j < len; ++j)
      for (std::size_t v = 0; v < full.shape(2); ++v) EXPECT_NEAR(got(0, j, v), full(0, start + j, v), 1e-12);
    start += len;
  }
  EXPECT_EQ(caches.at(0).length(), 12);
  EXPECT_EQ(caches[0].keys().shape(1), 2u);  // only the KV heads are cached
}

// The folder's weights replace every parameter, so load_hf_llama draws no random initial ones
// first (transformers' no_init_weights): the default generator is where it was.
TEST(Llama, LoadingDrawsNoRandomWeights) {
  manual_seed(11);
  const double next = default_generator().normal();
  manual_seed(11);
  auto model = models::load_hf_llama<float>(kFixture);
  EXPECT_EQ(default_generator().normal(), next);
}

TEST(Llama, StateDictKeysAreTransformers) {
  auto model = models::load_hf_llama<float>(kFixture);
  const auto keys = model->state_dict().keys();
  const auto file = load_safetensors<float>(kFixture + "/model.safetensors");
  EXPECT_EQ(keys.size(), file.size());
  for (const auto& [name, value] : file) EXPECT_NE(std::find(keys.begin(), keys.end(), name), keys.end()) << name;
}

TEST(Llama, SaveAndReloadGiveTheSameModel) {
  auto model = models::load_hf_llama<float>(kFixture);
  TempDir dir;
  models::save_hf_llama(*model, dir.path());
  auto again = models::load_hf_llama<float>(dir.path());
  const auto a = model->state_dict(), b = again->state_dict();
  for (const auto& [name, value] : a) EXPECT_TRUE(value == b.at(name)) << name;
  EXPECT_EQ(json::parse(read_bytes(dir.file("config.json"))), json::parse(read_bytes(kFixture + "/config.json")));
  EXPECT_EQ(json::parse(read_bytes(dir.file("generation_config.json"))),
            json::parse(read_bytes(kFixture + "/generation_config.json")));
}

// The fixture's model.safetensors is what safetensors' Python writer makes (tensors by name, F32,
// {"format": "pt"}): saving the loaded model writes it again byte for byte.
TEST(Llama, SavedWeightsAreTheFixturesBytes) {
  auto model = models::load_hf_llama<float>(kFixture);
  TempDir dir;
  models::save_hf_llama(*model, dir.path());
  EXPECT_TRUE(read_bytes(dir.file("model.safetensors")) == read_bytes(kFixture + "/model.safetensors"));
}

namespace {

// The message of the error loading `dir` throws.
std::string load_error(const std::string& dir) {
  try {
    models::load_hf_llama<float>(dir);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected load_hf_llama to throw";
  return "";
}

// A copy of the fixture folder whose weights are `tensors`.
void write_folder(const TempDir& dir, const NamedArrays<float>& tensors) {
  for (const char* name : {"config.json", "generation_config.json"})
    fs::copy_file(kFixture + "/" + name, dir.file(name));
  save_safetensors(tensors, dir.file("model.safetensors"));
}

}  // namespace

TEST(Llama, AMissingOrMisshapedTensorIsRefusedByName) {
  auto tensors = load_safetensors<float>(kFixture + "/model.safetensors");
  {
    TempDir dir;
    auto missing = tensors;
    missing.erase(std::find_if(missing.begin(), missing.end(),
                               [](const auto& t) { return t.first == "model.layers.1.mlp.up_proj.weight"; }));
    write_folder(dir, missing);
    const std::string message = load_error(dir.path());
    EXPECT_NE(message.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << message;
  }
  {
    TempDir dir;
    auto misshaped = tensors;
    for (auto& [name, value] : misshaped)
      if (name == "model.layers.0.self_attn.k_proj.weight")
        value = full_array<float>(Shape{64, 64}, 0.0f, "test");  // (32, 64) with 2 KV heads
    write_folder(dir, misshaped);
    const std::string message = load_error(dir.path());
    EXPECT_NE(message.find("model.layers.0.self_attn.k_proj.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("(32, 64)"), std::string::npos) << message;
  }
}

TEST(Llama, TiedHeadIsTheEmbedding) {
  models::LlamaConfig c = tiny_config();
  c.tie_word_embeddings = true;
  models::LlamaForCausalLM<double> model(c);
  EXPECT_EQ(model.lm_head, nullptr);
  EXPECT_TRUE(model.head_weight().same(model.model->embed_tokens->weight));
  for (const auto& key : model.state_dict().keys()) EXPECT_EQ(key.find("lm_head"), std::string::npos);
}

TEST(Llama, AnUnexpectedTensorIsRefusedByName) {
  TempDir dir;
  for (const char* name : {"config.json", "generation_config.json"})
    fs::copy_file(kFixture + "/" + name, dir.file(name));
  auto tensors = load_safetensors<float>(kFixture + "/model.safetensors");
  tensors.emplace_back("model.layers.0.self_attn.q_norm.weight", tensors.back().second);
  save_safetensors(tensors, dir.file("model.safetensors"));
  try {
    models::load_hf_llama<float>(dir.path());
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("q_norm"), std::string::npos) << e.what();
  }
}

TEST(Llama, GradcheckOfEveryParameter) {
  Generator generator(3);
  models::LlamaForCausalLM<double> model(tiny_config(), &generator);
  IndexArray ids = empty_array<std::int64_t>(Shape{2, 5});
  for (std::size_t i = 0; i < ids.size(); ++i) ids.data()[i] = static_cast<std::int64_t>((7 * i + 3) % 11);
  const auto result = gradcheck_parameters(
      [&] {
        const Tensor<double> logits = model.forward(ids);
        return sum(logits * logits);
      },
      model.named_parameters());
  EXPECT_TRUE(result.passed) << result.summary();
}

// The decode path rotates q and k in place (rotary_embedding_): an attention layer's step with the
// KV cache allocates its projections, head splits and attention output, and nothing for RoPE.
// Counted as the arrays empty_array hands out on this thread (the array cache's hits and misses).
TEST(Llama, TheDecodePathRotatesQueriesAndKeysInPlace) {
  if (!array_cache_enabled()) GTEST_SKIP() << "the array cache (which counts the arrays) is off";
  Generator generator(5);
  models::LlamaForCausalLM<float> model(tiny_config(), &generator);
  model.eval();
  NoGradGuard no_grad;
  models::LlamaAttention<float>& attention = *model.model->layers->ptr<models::LlamaDecoderLayer<float>>(0)->self_attn;
  const Tensor<float> x(full_array<float>(Shape{1, 1, 8}, 0.5f, "test"));  // one position, hidden 8
  nn::KVCache<float> cache;
  cache.reserve(4);
  attention.forward(x, model.model->rope_tables(0, 1), &cache);  // the cache's buffers
  const models::RopeTables<float> rope = model.model->rope_tables(1, 1);
  const ArrayCacheStats before = array_cache_stats();
  const Tensor<float> y = attention.forward(x, rope, &cache);
  const ArrayCacheStats after = array_cache_stats();
  // q, k and v: the projection, the (N, T, H, d) reshape and the transpose to (N, H, T, d) each (9);
  // the queries back to (N, T, H, d), the attention's output and o_proj's (3). RoPE's copies of q
  // and k would be 2 more.
  EXPECT_LE((after.hits + after.misses) - (before.hits + before.misses), 12u);
  EXPECT_EQ(cache.length(), 2);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 8}));
}

namespace {

// The fixture's model generating max_new tokens greedily from two prompts of 6 tokens, loaded from
// a copy of its folder with config.json edited by `edit_config` and generation_config.json replaced
// by `generation` (none when null).
IndexArray generate_two(const std::function<void(json&)>& edit_config, const json& generation, std::int64_t max_new) {
  TempDir copy;
  json config = json::parse(read_bytes(kFixture + "/config.json"));
  edit_config(config);
  write_bytes(copy.file("config.json"), config.dump(2));
  if (!generation.is_null()) write_bytes(copy.file("generation_config.json"), generation.dump(2));
  fs::copy_file(kFixture + "/model.safetensors", copy.file("model.safetensors"));
  auto model = models::load_hf_llama<float>(copy.path());
  IndexArray prompts = empty_array<std::int64_t>(Shape{2, 6});
  const json& first = expected()["greedy_prompt"];
  const json& second = expected()["input_ids"][1];
  for (std::size_t j = 0; j < 6; ++j) prompts(0, j) = first[j], prompts(1, j) = second[j];
  SamplingOptions greedy_options;
  greedy_options.greedy = true;
  return model->generate(prompts, max_new, greedy_options);
}

// Row i's tokens after the 6 of its prompt.
std::vector<std::int64_t> new_tokens(const IndexArray& out, std::size_t i) {
  return std::vector<std::int64_t>(&out(i, 6), &out(i, 0) + out.shape(1));
}

// `tokens` up to and with the first of `eos`, then `pad` up to `length`.
std::vector<std::int64_t> stopped(std::vector<std::int64_t> tokens, const std::vector<std::int64_t>& eos,
                                  std::int64_t pad, std::size_t length) {
  tokens.resize(length, pad);
  const auto end = std::find_first_of(tokens.begin(), tokens.end(), eos.begin(), eos.end());
  if (end != tokens.end()) std::fill(end + 1, tokens.end(), pad);
  return tokens;
}

}  // namespace

// eos_token_id as a list or an id, from generation_config.json when there is one (then its
// pad_token_id too), else from config.json, as transformers' generate: each sequence stops at the
// first of them and is padded after it; the loop ends once every sequence has stopped.
TEST(Llama, GenerationStopsAtAnyEosIdAndPadsWithGenerationConfigsPad) {
  const auto no_edit = [](json&) {};
  const IndexArray free = generate_two([](json& c) { c["eos_token_id"] = nullptr; }, json(), 30);  // no EOS
  ASSERT_EQ(free.shape(1), 36u);
  const std::vector<std::int64_t> first = new_tokens(free, 0), second = new_tokens(free, 1);
  EXPECT_EQ(first, expected()["greedy_float32"].get<std::vector<std::int64_t>>());
  const std::vector<std::int64_t> eos = {300, first[4], second[9]};
  const auto stop = [&](const std::vector<std::int64_t>& t) {
    return std::find_first_of(t.begin(), t.end(), eos.begin(), eos.end()) - t.begin();
  };
  ASSERT_NE(stop(first), stop(second));  // one sequence stops first and is padded
  const json generation = {{"bos_token_id", 1}, {"eos_token_id", eos}, {"pad_token_id", 7}};
  const IndexArray out = generate_two(no_edit, generation, 30);
  const std::size_t length = out.shape(1) - 6;
  EXPECT_EQ(new_tokens(out, 0), stopped(first, eos, 7, length));
  EXPECT_EQ(new_tokens(out, 1), stopped(second, eos, 7, length));
  EXPECT_EQ(length, static_cast<std::size_t>(std::max(stop(first), stop(second)) + 1));  // ends once both stopped

  // No generation_config.json: config.json's id (an int), padded with it (no pad_token_id).
  const IndexArray by_config = generate_two([&](json& c) { c["eos_token_id"] = first[2]; }, json(), 30);
  EXPECT_EQ(new_tokens(by_config, 0), stopped(first, {first[2]}, first[2], by_config.shape(1) - 6));
  EXPECT_EQ(new_tokens(by_config, 1), stopped(second, {first[2]}, first[2], by_config.shape(1) - 6));
}

// The MLP runs silu(gate) * up as the one op silu_mul (no silu of its own in a profile), with the
// bits of the unfused down(silu(gate(x)) * up(x)): output, input and every parameter's gradient.
TEST(Llama, MlpFusesSiluAndTheProductWithTheUnfusedBits) {
  models::LlamaMLP<float> mlp(tiny_config());
  const auto run = [&](bool fused) {
    mlp.zero_grad();
    const Tensor<float> x = random_leaf<float>({2, 5, 8}, 1);
    const Tensor<float> y =
        fused ? mlp.forward(x) : mlp.down_proj->forward(silu(mlp.gate_proj->forward(x)) * mlp.up_proj->forward(x));
    Generator g(2);
    y.backward(randn<float>(y.shape(), g, false));
    std::vector<Array<float>> out{y.value(), x.grad()};
    for (const auto& p : mlp.parameters()) out.push_back(p.grad());
    return out;
  };
  const auto want = run(false);
  profiler::Profile profile;
  const auto got = run(true);
  profile.stop();
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(max_abs_diff(want[i], got[i]), 0.0) << "array " << i;
  const auto count = [&](const std::string& name) {
    return std::count_if(profile.events().begin(), profile.events().end(),
                         [&](const profiler::Event& e) { return e.name == name; });
  };
  EXPECT_EQ(count("silu_mul"), 1);
  EXPECT_EQ(count("SiluMulBackward"), 1);
  EXPECT_EQ(count("silu"), 0);
  EXPECT_EQ(count("SiluBackward"), 0);
}
