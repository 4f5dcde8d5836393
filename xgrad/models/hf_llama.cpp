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

// The buffers older transformers saved beside the weights; recomputed from the config.
bool is_rotary_buffer(const std::string& name) { return ends_with(name, "rotary_emb.inv_freq"); }

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
  NamedArrays<T> tensors;
  SafetensorsDtypes dtypes;
  for (const auto& [name, value] : state) {
    tensors.emplace_back(name, value);
    const auto dtype = config.weight_dtypes.find(name);
    dtypes[name] = dtype != config.weight_dtypes.end() ? dtype->second : "F32";
  }
  std::sort(tensors.begin(), tensors.end(),  // safetensors' Python writer orders the tensors by name
            [](const auto& a, const auto& b) { return a.first < b.first; });
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
