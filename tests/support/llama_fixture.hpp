// The reference folders of the Llama family (tests/fixtures/hf-llama-tiny, hf-qwen2-tiny,
// hf-mistral-tiny and their half-precision copies), each with an expected.json of the logits of
// two inputs and 30 greedy tokens from a literal port of transformers' modeling code, and the
// checks the model tests run on them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/models/llama.hpp>
#include "serialize_util.hpp"

namespace xgrad::testing::llama_fixture {

// tests/fixtures/<name>.
inline std::string dir(const std::string& name) { return std::string(XGRAD_FIXTURES_DIR) + "/" + name; }

// <name>/expected.json, read once.
inline const nlohmann::json& expected(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, nlohmann::json::parse(read_bytes(dir(name) + "/expected.json"))).first;
  return it->second;
}

// ids as a (1, T) batch.
inline IndexArray row(const nlohmann::json& ids) {
  IndexArray a = empty_array<std::int64_t>(Shape{1, ids.size()});
  for (std::size_t j = 0; j < ids.size(); ++j) a(0, j) = ids[j].get<std::int64_t>();
  return a;
}

// The largest |logit - expected[key]| over both inputs, each run alone as the fixture ran them.
template <class T>
double max_logit_error(models::LlamaForCausalLM<T>& model, const nlohmann::json& expected, const std::string& key) {
  NoGradGuard no_grad;
  model.eval();
  double worst = 0;
  for (std::size_t s = 0; s < 2; ++s) {
    const Array<T> logits = model.forward(row(expected["input_ids"][s])).value();
    const nlohmann::json& want = expected[key][s];
    EXPECT_EQ(logits.shape(1), want.size());
    for (std::size_t t = 0; t < want.size(); ++t)
      for (std::size_t v = 0; v < want[t].size(); ++v)
        worst = std::max(worst, std::abs(static_cast<double>(logits(0, t, v)) - want[t][v].get<double>()));
  }
  return worst;
}

// The greedy_new_tokens tokens generate() appends to greedy_prompt (with the KV cache).
inline std::vector<std::int64_t> greedy(models::LlamaForCausalLM<float>& model, const nlohmann::json& expected) {
  const IndexArray prompt = row(expected["greedy_prompt"]);
  SamplingOptions greedy_options;
  greedy_options.greedy = true;
  const IndexArray out = model.generate(prompt, expected["greedy_new_tokens"].get<std::int64_t>(), greedy_options);
  return std::vector<std::int64_t>(out.begin() + static_cast<std::ptrdiff_t>(prompt.size()), out.end());
}

// Greedy decoding without the cache: the whole sequence forwarded for every new token.
inline std::vector<std::int64_t> greedy_without_cache(models::LlamaForCausalLM<float>& model,
                                                      const nlohmann::json& expected) {
  NoGradGuard no_grad;
  model.eval();
  std::vector<std::int64_t> seq = expected["greedy_prompt"].get<std::vector<std::int64_t>>();
  const std::size_t prompt = seq.size();
  for (std::int64_t k = 0; k < expected["greedy_new_tokens"].get<std::int64_t>(); ++k) {
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

// The greedy_float32 tokens with and without the cache, on both attention paths, and the float32
// logits on both (within `tolerance`).
inline void expect_greedy_on_both_paths(models::LlamaForCausalLM<float>& model, const nlohmann::json& expected,
                                        double tolerance = 1e-5) {
  const auto want = expected["greedy_float32"].get<std::vector<std::int64_t>>();
  EXPECT_EQ(greedy(model, expected), want);
  for (AttentionPath path : {AttentionPath::Materialized, AttentionPath::Tiled}) {
    AttentionPathScope scope(path);
    EXPECT_EQ(greedy_without_cache(model, expected), want) << "path " << static_cast<int>(path);
    EXPECT_LT(max_logit_error(model, expected, "logits_float32"), tolerance) << "path " << static_cast<int>(path);
  }
}

}  // namespace xgrad::testing::llama_fixture
