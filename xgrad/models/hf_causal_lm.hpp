// One entry point for a Hugging Face causal language model folder, chosen by config.json's
// model_type as transformers' AutoModelForCausalLM chooses its class:
//
//   auto lm = xgrad::models::load_hf_causal_lm<float>("SmolLM2-135M");   // "gpt2", "llama", "qwen2", "mistral"
//   lm.model_type;                              // "llama"
//   lm.forward(ids);                            // logits (N, T, V), whichever the model
//   lm.module().parameters();                   // training: any nn::Module code
//   if (auto llama = lm.as<xgrad::models::LlamaForCausalLM<float>>()) llama->config().rope_theta;
//   xgrad::models::save_hf_causal_lm(lm, "tuned");   // save_hf_gpt2 or save_hf_llama
//
// The model is a std::variant of the families' classes (GPT for gpt2, LlamaForCausalLM for the
// Llama family): a new family is one alternative, one line in the table of hf_causal_lm.cpp.
// A model_type xgrad does not read is refused naming the file, the key and the supported values
// ("'d/config.json': \"model_type\" is \"gemma\": xgrad reads \"gpt2\", \"llama\", \"qwen2\",
// \"mistral\""); everything else is the family's loader's (models/hf_gpt2.hpp, hf_llama.hpp).
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <xgrad/models/gpt.hpp>
#include <xgrad/models/llama.hpp>

namespace xgrad::models {

// The model_type values load_hf_causal_lm reads, in the order error messages list them.
const std::vector<std::string>& hf_causal_lm_model_types();

// dir/config.json's model_type, checked against hf_causal_lm_model_types() (std::runtime_error
// for a folder without config.json, xgrad::FormatError naming the file and the key otherwise).
std::string read_hf_model_type(const std::string& dir);

template <class T = float>
struct HFCausalLM {
  std::string model_type;  // config.json's
  std::variant<std::shared_ptr<GPT<T>>, std::shared_ptr<LlamaForCausalLM<T>>> model;

  // The model as a module (parameters, train/eval, state_dict).
  nn::Module<T>& module() const {
    return std::visit([](const auto& m) -> nn::Module<T>& { return *m; }, model);
  }
  // input_ids (N, T) -> logits (N, T, vocab_size).
  Tensor<T> forward(const IndexArray& input_ids) const {
    return std::visit([&](const auto& m) { return m->forward(input_ids); }, model);
  }
  // The family's generate (KV cache, sampling options; the Llama family stops at its EOS ids).
  IndexArray generate(const IndexArray& input_ids, std::int64_t max_new_tokens, const SamplingOptions& options,
                      Generator* generator = nullptr) const {
    return std::visit([&](const auto& m) { return m->generate(input_ids, max_new_tokens, options, generator); }, model);
  }
  // The model as Model (null when it is another family's).
  template <class Model>
  std::shared_ptr<Model> as() const {
    const auto* m = std::get_if<std::shared_ptr<Model>>(&model);
    return m != nullptr ? *m : nullptr;
  }
};

// Reads dir's model_type and loads the folder with its family's loader.
template <class T = float>
HFCausalLM<T> load_hf_causal_lm(const std::string& dir);

// Writes `lm` with its family's writer (save_hf_gpt2, save_hf_llama): all files or none.
template <class T>
void save_hf_causal_lm(const HFCausalLM<T>& lm, const std::string& dir);

extern template HFCausalLM<float> load_hf_causal_lm<float>(const std::string&);
extern template HFCausalLM<double> load_hf_causal_lm<double>(const std::string&);
extern template void save_hf_causal_lm<float>(const HFCausalLM<float>&, const std::string&);
extern template void save_hf_causal_lm<double>(const HFCausalLM<double>&, const std::string&);

}  // namespace xgrad::models
