// The config of a Hugging Face Llama-family folder (model_type "llama", "qwen2" or "mistral"), as
// transformers' LlamaConfig, Qwen2Config and MistralConfig read config.json:
//
//   const auto config = xgrad::models::load_llama_config("SmolLM2-135M");   // config.json (+ generation_config.json)
//   config.num_key_value_heads, config.head_dim, config.rope_scaling.rope_type, ...
//   config.to_json();   // config.json's keys and values, with the fields changed since updated
//
// Keys read (absent: the default of the model_type's config class in transformers):
//   vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
//   num_key_value_heads (null: num_attention_heads; absent: llama's num_attention_heads, qwen2's 32,
//   mistral's 8: the classes' defaults), head_dim (null or absent:
//   hidden_size / num_attention_heads, which must then divide), max_position_embeddings,
//   rms_norm_eps, hidden_act ("silu" only), tie_word_embeddings, attention_bias and mlp_bias
//   (llama's; qwen2 always has q/k/v biases and none on o_proj or the MLP, mistral none: a true
//   there is refused), bos_token_id, eos_token_id (an id or a list of ids), pad_token_id,
//   torch_dtype or transformers 5.x's dtype, partial_rotary_factor;
//   RoPE: rope_theta and rope_scaling (null, or {"rope_type" or "type": "default" | "linear" |
//   "llama3", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
//   or transformers 5.x's rope_parameters {"rope_theta", "rope_type", ...} in their place;
//   the attention window: mistral's sliding_window (null: none; absent: MistralConfig's 4096), qwen2's
//   use_sliding_window, sliding_window, max_window_layers and layer_types.
// Checked: every size in [1, 2^31 - 1], num_key_value_heads divides num_attention_heads, the rotary
// dims (head_dim * partial_rotary_factor) are even. Refused by name, with the key and the value:
// another model_type; hidden_act other than "silu"; a rope type other than those three ("yarn",
// "dynamic", "longrope", ...) or a key of rope_scaling xgrad does not know; and the options of the
// family's relatives that xgrad does not implement when they are set (attn_logit_softcapping,
// final_logit_softcapping, query_pre_attn_scalar, quantization_config, num_experts,
// num_local_experts, use_qk_norm, rope_interleaved, use_mrope, pretraining_tp other than 1,
// attention_dropout other than 0). Other keys (architectures, transformers_version, _name_or_path,
// initializer_range, use_cache, ...) are kept for to_json and not read: transformers' model code does
// not read them either.
//
// Errors: a missing config.json throws std::runtime_error naming it; bad content throws
// xgrad::FormatError naming the file and the key ("'d/config.json': \"hidden_act\" is \"gelu\": xgrad's
// Llama implements only \"silu\"").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/ops/ops.hpp>

namespace xgrad::models {

// How RoPE's inverse frequencies are scaled: the op's (ops.hpp, transformers' modeling_rope_utils).
using RopeScaling = xgrad::RopeScaling;

// generation_config.json: the token ids a generation loop stops at, and the file itself.
struct GenerationConfig {
  std::optional<std::int64_t> bos_token_id, pad_token_id;
  std::vector<std::int64_t> eos_token_id;  // the file's id or list (empty: none)
  nlohmann::json json;                     // the whole file, kept to be written back
};

// The defaults are LlamaConfig's (transformers); load_llama_config gives each model_type its own.
struct LlamaConfig {
  std::string model_type = "llama";  // "llama", "qwen2" or "mistral"
  std::int64_t vocab_size = 32000;
  std::int64_t hidden_size = 4096;
  std::int64_t intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32;
  std::int64_t num_attention_heads = 32;
  std::int64_t num_key_value_heads = 32;  // GQA: query head j uses KV head j / (heads / kv_heads)
  std::int64_t head_dim = 128;            // q/k/v per head; o_proj takes num_attention_heads * head_dim
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // RoPE rotates the first head_dim * this dims of each head
  bool attention_bias = false;         // llama: biases on q/k/v/o_proj
  bool mlp_bias = false;               // llama: biases on gate/up/down_proj
  std::string hidden_act = "silu";
  bool tie_word_embeddings = false;  // lm_head is embed_tokens (no lm_head.weight in the file)
  std::optional<std::int64_t> bos_token_id = 1, pad_token_id;
  std::vector<std::int64_t> eos_token_id = {2};  // an id or a list (empty: null)
  std::string torch_dtype;                       // the weights' dtype ("float32", "bfloat16", ...; "": none)
  // The attention window, when one applies to some layer (mistral's sliding_window, qwen2's with
  // use_sliding_window). Within the window, windowed attention is full causal attention, so a model
  // that computes full attention is exact for contexts of at most this many tokens and must refuse
  // longer ones, naming sliding_window.
  std::optional<std::int64_t> sliding_window;

  // The file this config was read from (null: built in code), kept so that to_json writes its keys
  // and values back; and generation_config.json when the folder has one.
  nlohmann::json source;
  std::optional<GenerationConfig> generation_config;
  // The folder's dtype of each tensor ("F32", "BF16", "F16", "F64"), by state_dict key, as
  // load_hf_llama found them: save_hf_llama writes each tensor back in its dtype (empty: F32).
  std::map<std::string, std::string> weight_dtypes;
  // The rotary `inv_freq` buffers older transformers (before 4.31) saved beside the weights
  // ("model.layers.0.self_attn.rotary_emb.inv_freq", (rotary_dim() / 2) each), as load_hf_llama
  // read them: the model computes its own from rope_theta and does not read these; save_hf_llama
  // writes them back unchanged.
  std::map<std::string, std::vector<double>> rotary_buffers;

  // Which projections have biases, by model_type (qwen2: q/k/v always, o_proj never).
  bool qkv_bias() const { return model_type == "qwen2" || (model_type == "llama" && attention_bias); }
  bool o_proj_bias() const { return model_type == "llama" && attention_bias; }
  bool mlp_has_bias() const { return model_type == "llama" && mlp_bias; }
  // The dims RoPE rotates per head: head_dim * partial_rotary_factor.
  std::int64_t rotary_dim() const;
  // Throws std::invalid_argument naming the key unless the fields are consistent: every size in
  // [1, 2^31 - 1], num_key_value_heads divides num_attention_heads, rotary_dim() even and at least 2,
  // a sliding_window at least 1. parse_llama_config refuses the same configs (FormatError naming the
  // file), and LlamaForCausalLM calls it before building anything.
  void check() const;

  // config.json: `source` with the fields that differ from what it says updated (in its spelling:
  // rope_parameters or rope_theta/rope_scaling, dtype or torch_dtype), so that an unchanged config
  // writes back exactly what transformers wrote. A config built in code, or whose model_type changed,
  // writes every key read above (transformers 4.x spelling, which 5.x reads too) and its
  // architectures. Throws std::invalid_argument for a config that would be refused when read back,
  // or read back differently (a sliding_window on a llama).
  nlohmann::json to_json() const;
};

// The model fields (not `source`, `generation_config`, `weight_dtypes` or `rotary_buffers`).
bool operator==(const LlamaConfig& a, const LlamaConfig& b);
inline bool operator!=(const LlamaConfig& a, const LlamaConfig& b) { return !(a == b); }

// A parsed config.json (`file` names it in errors).
LlamaConfig parse_llama_config(const nlohmann::json& config, const std::string& file = "config.json");

// A parsed generation_config.json.
GenerationConfig parse_generation_config(const nlohmann::json& generation, const std::string& file);

// dir/config.json, and dir/generation_config.json when the folder has one.
LlamaConfig load_llama_config(const std::string& dir);

}  // namespace xgrad::models
