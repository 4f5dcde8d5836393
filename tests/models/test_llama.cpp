// models::LlamaForCausalLM and load_hf_llama / save_hf_llama against tests/fixtures/hf-llama-tiny (a
// random Llama with GQA and an untied head, with the logits and greedy tokens of a literal port of
// transformers' modeling_llama.py: see the README there): the logits of two inputs within 1e-5 in
// float and 1e-10 in double, the 30 greedy tokens with the KV cache, the cached forward equal to the
// full one, without the cache on both attention paths, save and reload bit for bit (the weights
// file byte for byte), a tied model, refusals naming the tensor, and a
// double-precision gradcheck of a tiny random model's parameters.
#include "serialize_util.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include <xgrad/core/gradcheck.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/models/llama.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURES_DIR) + "/hf-llama-tiny";

const json& expected() {
  static const json e = json::parse(read_bytes(kFixture + "/expected.json"));
  return e;
}

IndexArray row(const json& ids) {
  IndexArray a = empty_array<std::int64_t>(Shape{1, ids.size()});
  for (std::size_t j = 0; j < ids.size(); ++j) a(0, j) = ids[j].get<std::int64_t>();
  return a;
}

// The largest |logit - expected| over both inputs, each run alone as the fixture ran them.
template <class T>
double max_logit_error(models::LlamaForCausalLM<T>& model, const std::string& key) {
  NoGradGuard no_grad;
  model.eval();
  double worst = 0;
  for (std::size_t s = 0; s < 2; ++s) {
    const Array<T> logits = model.forward(row(expected()["input_ids"][s])).value();
    const json& want = expected()[key][s];
    EXPECT_EQ(logits.shape(1), want.size());
    for (std::size_t t = 0; t < want.size(); ++t)
      for (std::size_t v = 0; v < want[t].size(); ++v)
        worst = std::max(worst, std::abs(static_cast<double>(logits(0, t, v)) - want[t][v].get<double>()));
  }
  return worst;
}

std::vector<std::int64_t> greedy(models::LlamaForCausalLM<float>& model) {
  const IndexArray prompt = row(expected()["greedy_prompt"]);
  SamplingOptions greedy_options;
  greedy_options.greedy = true;
  const IndexArray out = model.generate(prompt, expected()["greedy_new_tokens"].get<std::int64_t>(), greedy_options);
  return std::vector<std::int64_t>(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
}

// Greedy decoding without the cache: the whole sequence forwarded for every new token.
std::vector<std::int64_t> greedy_without_cache(models::LlamaForCausalLM<float>& model) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<std::int64_t> seq = expected()["greedy_prompt"].get<std::vector<std::int64_t>>();
  const std::size_t prompt = seq.size();
  for (std::int64_t k = 0; k < expected()["greedy_new_tokens"].get<std::int64_t>(); ++k) {
    IndexArray ids = empty_array<std::int64_t>(Shape{1, seq.size()});
    std::copy(seq.begin(), seq.end(), ids.begin());
    const Array<float> logits = model.forward(ids).value();
    const std::size_t last = seq.size() - 1, V = logits.shape(2);
    std::size_t best = 0;
    for (std::size_t v = 1; v < V; ++v)
      if (logits(0, last, v) > logits(0, last, best)) best = v;
    seq.push_back(static_cast<std::int64_t>(best));
  }
  return std::vector<std::int64_t>(seq.begin() + static_cast<std::ptrdiff_t>(prompt), seq.end());
}

// Sets the attention path for its lifetime.
struct AttentionPathScope {
  AttentionPath before = get_attention_path();
  explicit AttentionPathScope(AttentionPath path) { set_attention_path(path); }
  ~AttentionPathScope() { set_attention_path(before); }
};

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
  EXPECT_LT(max_logit_error(*model, "logits_float32"), 1e-5);
  EXPECT_LT(max_logit_error(*model, "logits_float64"), 2e-5);
}

TEST(Llama, FixtureLogitsFloat64) {
  auto model = models::load_hf_llama<double>(kFixture);
  EXPECT_LT(max_logit_error(*model, "logits_float64"), 1e-10);
}

TEST(Llama, FixtureGreedyTokensWithAndWithoutTheCacheOnBothAttentionPaths) {
  auto model = models::load_hf_llama<float>(kFixture);
  const auto want = expected()["greedy_float32"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(greedy(*model), want);
  for (AttentionPath path : {AttentionPath::Materialized, AttentionPath::Tiled}) {
    AttentionPathScope scope(path);
    EXPECT_EQ(greedy_without_cache(*model), want) << "path " << static_cast<int>(path);
    EXPECT_LT(max_logit_error(*model, "logits_float32"), 1e-5) << "path " << static_cast<int>(path);
  }
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
