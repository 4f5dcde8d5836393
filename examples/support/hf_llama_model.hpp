// A Hugging Face Llama-family folder (model_type llama, qwen2, mistral) and its tokenizer.json for
// the example programs, with every failure a xgrad::train::Refused line naming the flag.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/models/hf_causal_lm.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/text/tokenizer.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace hf_llama_model {

using Model = xgrad::models::LlamaForCausalLM<float>;

// dir/config.json, checked (another model_type is refused naming it); a folder without it is
// refused naming --hf.
inline xgrad::models::LlamaConfig config(const std::string& dir) {
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json"))
    throw xgrad::train::Refused("--hf " + dir + ": no config.json there: expected a Hugging Face Llama folder");
  try {
    return xgrad::models::load_llama_config(dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

// The model of `dir` with its weights (the library's entry point picks the class by config.json's
// model_type; this program takes the Llama family's), or (random_init) with weights drawn as
// transformers' _init_weights from the default generator.
inline std::shared_ptr<Model> load(const std::string& dir, bool random_init) {
  try {
    if (random_init) {  // saved in the folder's dtypes, as a loaded model is (a resumed run too)
      xgrad::models::LlamaConfig c = config(dir);
      if (xgrad::has_hf_weights(dir))
        for (const auto& [name, where] : xgrad::read_hf_weights(dir).tensors) c.weight_dtypes[name] = where.entry.dtype;
      return std::make_shared<Model>(c);
    }
    const auto lm = xgrad::models::load_hf_causal_lm<float>(dir);
    if (auto llama = lm.as<Model>()) return llama;
    throw xgrad::train::Refused("--hf " + dir + ": model_type \"" + lm.model_type +
                                "\": finetune_llm fine-tunes the Llama family (finetune_gpt2: gpt2)");
  } catch (const xgrad::train::Refused&) {
    throw;
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

// The tokenizer.json `path` given by `flag` (any BPE file xgrad::text::Tokenizer reads), whose ids
// must fit the model's vocab_size.
inline xgrad::text::Tokenizer tokenizer(const std::string& flag, const std::string& path, std::int64_t vocab_size) {
  if (!std::filesystem::is_regular_file(path))
    throw xgrad::train::Refused(flag + " " + path + ": no such file: expected a tokenizer.json" +
                                (flag == "--hf" ? " in the folder (or pass --tokenizer FILE)" : ""));
  try {
    xgrad::text::Tokenizer tok = xgrad::text::Tokenizer::load(path);
    if (std::int64_t(tok.vocab_size()) > vocab_size)
      throw xgrad::train::Refused(flag + " " + path + ": the tokenizer has " + std::to_string(tok.vocab_size()) +
                                  " ids, beyond the model's vocab_size " + std::to_string(vocab_size));
    return tok;
  } catch (const xgrad::train::Refused&) {
    throw;
  } catch (const std::exception& e) {
    throw xgrad::train::Refused(flag + " " + path + ": " + e.what());
  }
}

// The ids a sample starts from: the prompt as transformers' tokenizer(prompt) gives them (with the
// BOS of a tokenizer.json's post-processor); an empty result starts from config.json's BOS.
inline std::vector<std::int64_t> prompt_ids(const xgrad::text::Tokenizer& tok, const std::string& prompt,
                                            const xgrad::models::LlamaConfig& config) {
  std::vector<std::int64_t> ids = tok.as_hf() ? tok.as_hf()->encode(prompt, true) : tok.encode(prompt);
  if (ids.empty() && config.bos_token_id) ids.push_back(*config.bos_token_id);
  if (ids.empty())
    throw xgrad::train::Refused(
        "--prompt is empty and neither the tokenizer nor config.json has a BOS token: "
        "expected --prompt TEXT");
  return ids;
}

// `ids` and up to `tokens` more drawn from `model` (fewer when it produces its EOS), as text: the
// special tokens (BOS, EOS) and ids beyond the tokenizer's vocabulary left out.
inline std::string sample(Model& model, const xgrad::text::Tokenizer& tok, const std::vector<std::int64_t>& ids,
                          std::int64_t tokens, const xgrad::SamplingOptions& options, std::uint64_t seed) {
  xgrad::IndexArray idx = xgrad::IndexArray::from_shape({std::size_t(1), ids.size()});
  std::copy(ids.begin(), ids.end(), idx.begin());
  xgrad::Generator generator(seed);
  const xgrad::IndexArray out = model.generate(idx, tokens, options, &generator);
  std::vector<std::int64_t> known;
  std::copy_if(out.begin(), out.end(), std::back_inserter(known),
               [&](std::int64_t id) { return id >= 0 && std::size_t(id) < tok.vocab_size(); });
  return tok.as_hf() ? tok.as_hf()->decode(known, /*skip_special_tokens=*/true) : tok.decode(known);
}

}  // namespace hf_llama_model
