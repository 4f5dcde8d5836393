#include <xgrad/models/hf_llama.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <xgrad/nn/no_init_weights.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/serialize/safetensors.hpp>

namespace xgrad::models {

namespace {

constexpr const char* kLoad = "load_hf_llama";
constexpr const char* kSave = "save_hf_llama";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The buffers older transformers saved beside the weights; the model computes its own from the
// config, and save_hf_llama writes the folder's back.
bool is_rotary_buffer(const std::string& name) { return ends_with(name, "rotary_emb.inv_freq"); }

// The folder's rotary buffers, each checked to be (rotary_dim / 2) of a loadable dtype, read as
// double (exact for every dtype the folder may have).
std::map<std::string, std::vector<double>> read_rotary_buffers(const HFWeights& weights, const LlamaConfig& config) {
  const Shape shape{static_cast<std::size_t>(config.rotary_dim() / 2)};
  for (const auto& [name, where] : weights.tensors)
    if (is_rotary_buffer(name)) expect_hf_tensor(weights, name, shape, "(rotary inv_freq: head_dim / 2)", kLoad);
  std::map<std::string, std::vector<double>> buffers;
  for (auto& [name, value] : load_hf_tensors<double>(weights, is_rotary_buffer, kLoad))
    buffers[name].assign(value.begin(), value.end());
  return buffers;
}

// The value save_hf_llama writes for the folder's rotary buffer `name`: the one loaded, or (a model
// built from the config and the folder's dtypes) the config's own, as transformers computed it.
template <class T>
Array<T> rotary_buffer(const LlamaConfig& config, const std::string& name) {
  const auto loaded = config.rotary_buffers.find(name);
  if (loaded == config.rotary_buffers.end())
    return rope_inv_freq<T>(config.head_dim, config.rope_theta, config.rope_scaling, config.partial_rotary_factor)
        .value();
  Array<T> value = empty_array<T>({loaded->second.size()}, kSave);
  std::copy(loaded->second.begin(), loaded->second.end(), value.begin());
  return value;
}

// The tensors save_hf_llama writes: the model's, and the folder's others (its dtypes name them) so
// that the file has the folder's keys again: a tied model's lm_head.weight (the embedding) and the
// rotary buffers.
template <class T>
NamedArrays<T> tensors_to_save(const LlamaConfig& config, const nn::StateDict<T>& state) {
  NamedArrays<T> tensors(state.begin(), state.end());
  for (const auto& [name, dtype] : config.weight_dtypes) {
    if (state.contains(name)) continue;
    if (config.tie_word_embeddings && name == "lm_head.weight")
      tensors.emplace_back(name, state.at("model.embed_tokens.weight"));
    else if (is_rotary_buffer(name))
      tensors.emplace_back(name, rotary_buffer<T>(config, name));
  }
  std::sort(tensors.begin(), tensors.end(),  // safetensors' Python writer orders the tensors by name
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return tensors;
}

// Checks every tensor of the folder against the model's parameters: each there with its shape,
// nothing else but the rotary buffers and, for a tied model, lm_head.weight.
template <class T>
void check_tensors(const HFWeights& weights, const nn::StateDict<T>& state, bool tied) {
  for (const auto& [name, value] : state) expect_hf_tensor(weights, name, shape_of(value), "(from config.json)", kLoad);
  for (const auto& [name, where] : weights.tensors) {
    if (state.contains(name) || is_rotary_buffer(name)) continue;
    if (tied && name == "lm_head.weight") {
      expect_hf_tensor(weights, name, shape_of(state.at("model.embed_tokens.weight")), "(tied to the embedding)",
                       kLoad);
      continue;
    }
    throw FormatError(detail::concat(kLoad, ": '", where.file, "': unexpected tensor \"", name,
                                     "\": not one of the Llama model's that config.json describes"));
  }
}

}  // namespace

template <class T>
std::shared_ptr<LlamaForCausalLM<T>> load_hf_llama(const std::string& dir) {
  LlamaConfig config = load_llama_config(dir);
  const HFWeights weights = read_hf_weights(dir, kLoad);
  for (const auto& [name, where] : weights.tensors) config.weight_dtypes[name] = where.entry.dtype;
  config.rotary_buffers = read_rotary_buffers(weights, config);
  std::shared_ptr<LlamaForCausalLM<T>> model;
  {  // every parameter is read from the folder below: no random draws first (transformers' no_init_weights)
    nn::init::NoInitWeights no_init;
    model = std::make_shared<LlamaForCausalLM<T>>(config);
  }
  nn::StateDict<T> state = model->state_dict();
  check_tensors(weights, state, config.tie_word_embeddings);
  auto tensors = load_hf_tensors<T>(
      weights, [](const std::string& name) { return !is_rotary_buffer(name); }, kLoad);
  nn::StateDict<T> loaded;
  for (const auto& [name, value] : state) {
    auto it = tensors.find(name);
    if (it == tensors.end() ||
        shape_of(it->second) != shape_of(value))  // the files changed since their headers were read
      throw FormatError(
          detail::concat(kLoad, ": '", weights.listing, "': tensor \"", name, "\" changed while the folder was read"));
    loaded.insert(name, std::move(it->second));
  }
  const auto head = tensors.find("lm_head.weight");
  if (config.tie_word_embeddings && head != tensors.end()) {
    const Array<T>& embedding = loaded.at("model.embed_tokens.weight");
    // Tied means the same bits (a NaN in the embedding is tied to the same NaN).
    if (std::memcmp(head->second.data(), embedding.data(), embedding.size() * sizeof(T)) != 0)
      throw FormatError(detail::concat(kLoad, ": '", weights.tensors.at("lm_head.weight").file,
                                       "': tensor \"lm_head.weight\" differs from \"model.embed_tokens.weight\" but "
                                       "config.json says tie_word_embeddings: true"));
  }
  model->load_state_dict(loaded);
  return model;
}

template <class T>
void save_hf_llama(const LlamaForCausalLM<T>& model, const std::string& dir) {
  save_hf_llama(model, model.state_dict(), dir);
}

template <class T>
void save_hf_llama(const LlamaForCausalLM<T>& model, const nn::StateDict<T>& state, const std::string& dir) {
  LlamaConfig config = model.config();
  if (config.weight_dtypes.empty()) config.torch_dtype = "float32";  // built in code: F32 below
  const std::string config_text = config.to_json().dump(2) + "\n";
  const NamedArrays<T> tensors = tensors_to_save(config, state);
  SafetensorsDtypes dtypes;
  for (const auto& [name, value] : tensors) {
    const auto dtype = config.weight_dtypes.find(name);
    dtypes[name] = dtype != config.weight_dtypes.end() ? dtype->second : "F32";
  }
  const auto text = [](const std::string& t) {
    return [&t](std::ostream& out) { out.write(t.data(), static_cast<std::streamsize>(t.size())); };
  };
  std::vector<FolderFile> files = {{"config.json", text(config_text)},
                                   {"model.safetensors", [&](std::ostream& out) {
                                      write_safetensors(out, tensors, {{"format", "pt"}}, dtypes);
                                    }}};
  std::string generation_text;
  if (config.generation_config) {
    generation_text = config.generation_config->json.dump(2) + "\n";
    files.push_back({"generation_config.json", text(generation_text)});
  }
  write_files_together(dir, files, kSave);
}

template std::shared_ptr<LlamaForCausalLM<float>> load_hf_llama<float>(const std::string&);
template std::shared_ptr<LlamaForCausalLM<double>> load_hf_llama<double>(const std::string&);
template void save_hf_llama<float>(const LlamaForCausalLM<float>&, const std::string&);
template void save_hf_llama<double>(const LlamaForCausalLM<double>&, const std::string&);
template void save_hf_llama<float>(const LlamaForCausalLM<float>&, const nn::StateDict<float>&, const std::string&);
template void save_hf_llama<double>(const LlamaForCausalLM<double>&, const nn::StateDict<double>&, const std::string&);

}  // namespace xgrad::models
