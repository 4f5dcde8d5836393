// Hugging Face GPT-2 folders (transformers' GPT2LMHeadModel.save_pretrained / from_pretrained) to
// and from models::GPT:
//
//   auto model = xgrad::models::load_hf_gpt2<float>("gpt2");        // config.json + model.safetensors
//   ... fine-tune model->forward(idx) ...
//   xgrad::models::save_hf_gpt2(*model, "gpt2-finetuned");          // from_pretrained reads it
//
// The folder: config.json, and model.safetensors or the shards that model.safetensors.index.json
// lists in its "weight_map" (model.safetensors first when both are there, as transformers does).
// Tensor names, with or without the "transformer." prefix (a GPT2LMHeadModel's or a GPT2Model's
// checkpoint), and where they go in GPT (C = n_embd, F = n_inner or 4 C, V = vocab_size,
// P = n_positions):
//
//   transformer.wte.weight             (V, C)    wte.weight (also the tied head)
//   transformer.wpe.weight             (P, C)    wpe.weight
//   transformer.h.{i}.ln_1.*           (C)       h.layers.{i}.norm1.*
//   transformer.h.{i}.attn.c_attn.*    (C, 3C)   h.layers.{i}.self_attn.in_proj_weight (3C, C), in_proj_bias
//   transformer.h.{i}.attn.c_proj.*    (C, C)    h.layers.{i}.self_attn.out_proj.*
//   transformer.h.{i}.ln_2.*           (C)       h.layers.{i}.norm2.*
//   transformer.h.{i}.mlp.c_fc.*       (C, F)    h.layers.{i}.linear1.*
//   transformer.h.{i}.mlp.c_proj.*     (F, C)    h.layers.{i}.linear2.*
//   transformer.ln_f.*                 (C)       ln_f.*
//
// The weights of GPT-2's Conv1D are stored (in, out) and transposed into Linear's (out, in);
// c_attn's output is q, k, v concatenated, which is in_proj_weight's row order. The buffers
// h.{i}.attn.bias and h.{i}.attn.masked_bias (the causal mask) are skipped, whatever their dtype
// (older transformers stored BOOL or U8 masks), and not read; lm_head.weight, when stored, must
// equal wte's bit for bit (a NaN in wte is tied to the same NaN). F32, F64, F16 and BF16 tensors
// are converted to T.
//
// config.json (missing keys take GPT2Config's defaults): model_type must be "gpt2"; vocab_size,
// n_positions, n_embd, n_layer, n_head, n_inner (null: 4 n_embd), layer_norm_epsilon;
// activation_function "gelu_new" or "gelu_pytorch_tanh" (GELU(approximate="tanh")), "gelu" or
// "relu"; attn_pdrop, embd_pdrop and resid_pdrop must be equal (GPT has one dropout). Options GPT
// does not implement are refused by name when they are not their default:
// scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, add_cross_attention (false),
// scale_attn_weights and tie_word_embeddings (true), another activation_function. bos_token_id and
// eos_token_id (an integer >= 0 or null, absent: 50256) are kept in GPTConfig for save_hf_gpt2, and
// so is the text of generation_config.json when the folder has one. Other keys that do not change
// the language model (summary_*, task_specific_params, n_ctx) are not read.
//
// Errors: a file that cannot be read (a folder without config.json) throws std::runtime_error
// naming it; bad content throws xgrad::FormatError (a std::runtime_error) naming the file and the
// key: another model_type, an unimplemented option, a missing, misshaped or unexpected tensor, a
// truncated shard. Every tensor's name and shape is checked against the config from the files'
// headers before the model is built or any tensor is read.
#pragma once

#include <memory>
#include <string>

#include <xgrad/base/random.hpp>
#include <xgrad/models/gpt.hpp>

namespace xgrad::models {

// Reads and checks dir/config.json (and keeps dir/generation_config.json's text). When the folder
// has weights, its sizes are checked against their headers before it is returned, so that a model
// built from it allocates no more than the files hold: a forged size throws FormatError naming
// config.json, the key and the tensor ("n_positions" is 1000000000 but "transformer.wpe.weight"
// ... has 128 rows). A folder of config.json alone is read without that check.
GPTConfig load_hf_gpt2_config(const std::string& dir);

// Builds the GPT that dir's config.json describes (`generator` draws its initial weights, which
// the folder's then replace) and loads the folder's weights into it.
template <class T = float>
std::shared_ptr<GPT<T>> load_hf_gpt2(const std::string& dir, Generator* generator = nullptr);

// Loads dir's weights into `model`, whose config gives the shapes expected (config.json is not
// read: to change what the folder's config says, e.g. the dropout for fine-tuning, build the model
// from load_hf_gpt2_config's result edited). Nothing is written into the model unless every
// tensor loads.
template <class T>
void load_hf_gpt2_weights(GPT<T>& model, const std::string& dir);

// Writes `model` as save_pretrained does: dir/config.json (GPT2Config's keys, as transformers
// writes them, with the config's bos_token_id and eos_token_id), dir/model.safetensors (the names
// above with the "transformer." prefix, F32, sorted by name, metadata {"format": "pt"}; neither the
// attention mask buffers nor lm_head) and dir/generation_config.json (the config's
// generation_config, else transformers' default one: _from_model_config, the token ids,
// output_attentions, output_hidden_states, transformers_version, use_cache). A model built here
// has no ids of its own: 50256 (GPT-2's <|endoftext|>) is written when the vocabulary holds it,
// else its last id. The folder is created when missing. The three files are written to temporary
// files first and then renamed over the old ones: a failed save (std::runtime_error naming the
// file, or std::invalid_argument for a model GPT-2 cannot hold: bias=false) leaves the folder's
// previous files as they were. A target that exists and is not a regular file is refused before anything
// is written; a symbolic link is written through. A model.safetensors.index.json already in the
// folder is left there (transformers and load_hf_gpt2 read model.safetensors first).
template <class T>
void save_hf_gpt2(const GPT<T>& model, const std::string& dir);

extern template std::shared_ptr<GPT<float>> load_hf_gpt2<float>(const std::string&, Generator*);
extern template std::shared_ptr<GPT<double>> load_hf_gpt2<double>(const std::string&, Generator*);
extern template void load_hf_gpt2_weights<float>(GPT<float>&, const std::string&);
extern template void load_hf_gpt2_weights<double>(GPT<double>&, const std::string&);
extern template void save_hf_gpt2<float>(const GPT<float>&, const std::string&);
extern template void save_hf_gpt2<double>(const GPT<double>&, const std::string&);

}  // namespace xgrad::models
