// PEFT's LoRA adapter folder (what PeftModel.save_pretrained writes) to and from a model with LoRA
// layers (nn/lora.hpp):
//
//   auto model = models::load_hf_llama<float>("SmolLM2-135M");
//   models::load_peft_adapter(*model, "smol-lora");        // injects the layers, loads A and B
//   models::save_peft_adapter(*model, config, "out", "SmolLM2-135M");
//   models::merge_and_save_hf_llama(*model, "merged");      // a plain Hugging Face folder
//
// The folder: adapter_config.json (PEFT's LoraConfig: r, lora_alpha, target_modules, lora_dropout,
// use_rslora, bias "none", fan_in_fan_out false, peft_type "LORA", task_type "CAUSAL_LM",
// base_model_name_or_path) and adapter_model.safetensors, whose keys are
// "base_model.model." + the model's keys (base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight):
// lora_A (r, in_features), lora_B (out_features, r); F32, F16, BF16 or F64 on load, F32 on save.
// An option xgrad does not implement (use_dora, bias other than "none", fan_in_fan_out, a regex
// target_modules, rank_pattern, modules_to_save, layers_to_transform, ...) is refused by name, as
// is a missing, extra or misshaped tensor: xgrad::FormatError naming the file, the key, what was
// expected and what came, before the model is changed. Saving writes both files or neither.
#pragma once

#include <string>
#include <vector>

#include <xgrad/models/llama.hpp>
#include <xgrad/nn/lora.hpp>

namespace xgrad::models {

// The key prefix of PEFT's saved tensors.
constexpr const char* kPeftPrefix = "base_model.model.";

// dir/adapter_config.json as a LoraConfig; base_model_name_or_path goes to `base_model` when given.
nn::LoraConfig read_peft_config(const std::string& dir, std::string* base_model = nullptr);

// Reads the folder, injects its LoRA layers into `model` (nn::inject_lora: the rest frozen) and
// loads their weights. Returns the config.
template <class T>
nn::LoraConfig load_peft_adapter(nn::Module<T>& model, const std::string& dir);

// Writes the model's LoRA layers and `config` (its target_modules; "all-linear" as the list of the
// adapted modules' names, as PEFT saves it).
template <class T>
void save_peft_adapter(nn::Module<T>& model, const nn::LoraConfig& config, const std::string& dir,
                       const std::string& base_model_name_or_path);

// Merges every LoRA layer into its weight, saves the base model's weights with save_hf_llama (no
// lora_A / lora_B), then unmerges (the model trains on as it was).
template <class T>
void merge_and_save_hf_llama(LlamaForCausalLM<T>& model, const std::string& dir);

}  // namespace xgrad::models
