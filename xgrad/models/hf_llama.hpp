// Hugging Face Llama-family folders (model_type "llama", "qwen2", "mistral") to and from
// LlamaForCausalLM:
//
//   auto model = xgrad::models::load_hf_llama<float>("SmolLM2-135M");  // config.json + weights
//   ... train ...
//   xgrad::models::save_hf_llama(*model, "out");                       // transformers reads it
//
// The folder: config.json (models/llama_config.hpp says which keys are read and which refused),
// generation_config.json when present, and model.safetensors or the shards its index lists
// (serialize/hf_folder.hpp). The tensor names are the model's state_dict keys (they are
// transformers'); F32, F16, BF16 and F64 tensors are converted to T on load. Every tensor the
// config implies must be there with its shape; a tensor that is not one of the model's is refused
// by name, except the rotary `inv_freq` buffers older transformers saved ((head_dim / 2) each,
// kept in LlamaConfig::rotary_buffers; the model computes its own from the config) and, for a
// tied model, an `lm_head.weight` equal to the embedding bit for bit.
//
// save_hf_llama writes config.json (the loaded folder's keys and values, Config::to_json),
// generation_config.json (the loaded one, when there was one) and model.safetensors, all three
// or none (a failed save leaves the folder as it was). model.safetensors has the folder's keys:
// the model's tensors, and those the folder had beside them (a tied model's lm_head.weight, written
// as the embedding; the rotary buffers as loaded). Each tensor is written in the dtype the
// loaded folder had it in (LlamaConfig::weight_dtypes: BF16 and F16 rounded to nearest even, as
// torch's .to()), so that a folder loaded and saved unchanged is written back byte for byte, and
// config.json keeps its torch_dtype (or 5.x dtype); a model built in code is written as F32 and
// config.json says "float32". To save a bf16 folder's fine-tuned weights at full precision, build
// the model from its config with weight_dtypes cleared and load the state dict into it.
#pragma once

#include <memory>
#include <string>

#include <xgrad/models/llama.hpp>

namespace xgrad::models {

template <class T>
std::shared_ptr<LlamaForCausalLM<T>> load_hf_llama(const std::string& dir);

template <class T>
void save_hf_llama(const LlamaForCausalLM<T>& model, const std::string& dir);

// The same with the weights `state` in place of model.state_dict() (a LoRA model's base weights
// after merging: models/peft.hpp's merge_and_save_hf_llama).
template <class T>
void save_hf_llama(const LlamaForCausalLM<T>& model, const nn::StateDict<T>& state, const std::string& dir);

extern template std::shared_ptr<LlamaForCausalLM<float>> load_hf_llama<float>(const std::string&);
extern template std::shared_ptr<LlamaForCausalLM<double>> load_hf_llama<double>(const std::string&);
extern template void save_hf_llama<float>(const LlamaForCausalLM<float>&, const std::string&);
extern template void save_hf_llama<double>(const LlamaForCausalLM<double>&, const std::string&);
extern template void save_hf_llama<float>(const LlamaForCausalLM<float>&, const nn::StateDict<float>&,
                                          const std::string&);
extern template void save_hf_llama<double>(const LlamaForCausalLM<double>&, const nn::StateDict<double>&,
                                           const std::string&);

}  // namespace xgrad::models
