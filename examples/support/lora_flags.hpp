// LoRA for the fine-tuning examples (nn/lora.hpp, models/peft.hpp): the flags, the adapter a run
// starts from or writes, and the merged folder, with every failure a Refused line naming the flag.
//
//   finetune_llm --hf SmolLM2-135M --text input.txt --lora 16 --lora-targets all-linear --save-adapter smol-lora
//   finetune_llm --hf SmolLM2-135M --adapter smol-lora --sample 100 --merge-and-save smol-merged
#pragma once

#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <xgrad/models/peft.hpp>
#include <xgrad/train/cli.hpp>
#include <xgrad/train/files.hpp>
#include <xgrad/train/trainer.hpp>

namespace lora_flags {

namespace train = xgrad::train;
using Model = xgrad::models::LlamaForCausalLM<float>;

struct Settings {  // saved in checkpoints: a resumed run rebuilds the same layers
  int r = 0;       // 0: no LoRA (full fine-tuning)
  double alpha = 16, dropout = 0;
  std::string targets = "q_proj,v_proj", adapter;
};

struct Outputs {
  std::string save_adapter, merge_and_save;
  bool any() const { return !save_adapter.empty() || !merge_and_save.empty(); }
};

inline void add_flags(CLI::App& app, train::Settings& settings, Settings& s, Outputs& o) {
  namespace cli = xgrad::train::cli;
  cli::add_setting(app, settings, "--lora", s.r, "train a LoRA adapter of rank R, the model frozen (0: every weight)")
      ->check(cli::integer_in(0, 1 << 16));
  cli::add_setting(app, settings, "--lora-alpha", s.alpha, "LoRA's alpha (scaling alpha / R)");
  cli::add_setting(app, settings, "--lora-dropout", s.dropout, "dropout before LoRA's A, in [0, 1)");
  cli::add_setting(app, settings, "--lora-targets", s.targets, "comma-separated module names, or all-linear");
  cli::add_setting(app, settings, "--adapter", s.adapter, "a PEFT adapter folder to start from (or sample with)");
  app.add_option("--save-adapter", o.save_adapter, "write the LoRA adapter as a PEFT folder");
  app.add_option("--merge-and-save", o.merge_and_save,
                 "write the model with the adapter merged, as a Hugging Face folder");
}

inline std::vector<train::RunPath> paths(const Settings& s, const Outputs& o) {
  return {train::RunPath::input_folder("--adapter", s.adapter, {"adapter_config.json", "adapter_model.safetensors"}),
          train::RunPath::output_folder("--save-adapter", o.save_adapter,
                                        {"adapter_config.json", "adapter_model.safetensors"}),
          train::RunPath::output_folder("--merge-and-save", o.merge_and_save,
                                        {"config.json", "generation_config.json", "model.safetensors"})};
}

inline xgrad::nn::LoraConfig config_of(const Settings& s) {
  std::vector<std::string> targets;
  std::stringstream list(s.targets);
  for (std::string t; std::getline(list, t, ',');)
    if (!t.empty()) targets.push_back(t);
  return xgrad::nn::LoraConfig().r(s.r).lora_alpha(s.alpha).lora_dropout(s.dropout).target_modules(targets);
}

// --adapter's layers, else --lora's fresh ones (nothing without either); the config in use.
inline std::optional<xgrad::nn::LoraConfig> apply(Model& model, const Settings& s, const Outputs& o) {
  if (s.adapter.empty() && s.r == 0) {
    if (o.any()) throw train::Refused("--save-adapter and --merge-and-save need --lora R or --adapter DIR");
    return std::nullopt;
  }
  xgrad::nn::LoraConfig config;
  try {
    config = s.adapter.empty() ? config_of(s) : xgrad::models::load_peft_adapter(model, s.adapter);
    if (s.adapter.empty()) xgrad::nn::inject_lora(model, config);
  } catch (const std::exception& e) {
    throw train::Refused((s.adapter.empty() ? "--lora: " : "--adapter " + s.adapter + ": ") + e.what());
  }
  std::int64_t trainable = 0, all = 0;
  for (const auto& p : model.parameters()) (p.requires_grad() ? trainable : all) += p.numel();
  std::printf("LoRA r %lld, alpha %g on %zu modules: %lld trainable parameters, %lld frozen\n", (long long)config.r(),
              config.lora_alpha(), xgrad::nn::lora_layers(model).size(), (long long)trainable, (long long)all);
  return config;
}

inline void save(Model& model, const std::optional<xgrad::nn::LoraConfig>& config, const Outputs& o,
                 const std::string& base) {
  if (!config) return;
  if (!o.save_adapter.empty()) {
    xgrad::models::save_peft_adapter(model, *config, o.save_adapter, base);
    std::printf("saved the adapter to %s (adapter_config.json, adapter_model.safetensors)\n", o.save_adapter.c_str());
  }
  if (!o.merge_and_save.empty()) {
    xgrad::models::merge_and_save_hf_llama(model, o.merge_and_save);
    std::printf("saved the merged model to %s\n", o.merge_and_save.c_str());
  }
}

}  // namespace lora_flags
