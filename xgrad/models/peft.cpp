#include <xgrad/models/peft.hpp>

#include <cmath>
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <xgrad/base/json_input.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/hf_folder.hpp>
#include <xgrad/serialize/safetensors.hpp>

namespace xgrad::models {

namespace {

constexpr const char* kLoad = "load_peft_adapter";
constexpr const char* kConfigFile = "adapter_config.json";
constexpr const char* kWeightsFile = "adapter_model.safetensors";

// PEFT options that change what the adapter computes and that xgrad does not implement: each must
// be absent, null, false, or an empty string, list or object.
const char* const kUnsupported[] = {"use_dora",
                                    "fan_in_fan_out",
                                    "lora_bias",
                                    "use_qalora",
                                    "rank_pattern",
                                    "alpha_pattern",
                                    "modules_to_save",
                                    "layers_to_transform",
                                    "layers_pattern",
                                    "layer_replication",
                                    "exclude_modules",
                                    "target_parameters",
                                    "trainable_token_indices",
                                    "use_bdlora",
                                    "megatron_config",
                                    "arrow_config"};

bool is_off(const nlohmann::json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

void expect_string(const JsonValue& root, const char* key, const std::string& expected) {
  if (!root.has(key)) return;
  const JsonValue v = root.at(key);
  if (!v.is_string() || v.string() != expected)
    v.fail_expected(detail::concat("\"", expected, "\" (the only value xgrad implements)"));
}

std::vector<std::string> read_targets(const JsonValue& root) {
  const JsonValue t = root.at("target_modules");
  if (t.is_string()) {
    if (t.string() != "all-linear")
      t.fail_expected("a list of module names, or \"all-linear\" (a regex string is not implemented)");
    return {"all-linear"};
  }
  t.expect_array();
  std::vector<std::string> out;
  for (std::size_t i = 0; i < t.size(); ++i) out.push_back(t.at(i).string());
  if (out.empty()) t.fail_expected("at least one module name");
  return out;
}

std::string shape_text(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// The tensors the config implies: name (without the prefix) -> shape.
template <class T>
std::map<std::string, Shape> expected_tensors(nn::Module<T>& model, const nn::LoraConfig& config,
                                              const std::string& config_path) {
  std::map<std::string, Shape> out;
  try {
    for (const auto& [path, linear] : nn::lora_targets(model, config)) {
      const auto in = std::size_t(linear->options().in_features()),
                 out_f = std::size_t(linear->options().out_features());
      out[path + ".lora_A.weight"] = Shape{std::size_t(config.r()), in};
      out[path + ".lora_B.weight"] = Shape{out_f, std::size_t(config.r())};
    }
  } catch (const std::invalid_argument& e) {
    throw FormatError(detail::concat(kLoad, ": '", config_path, "': ", e.what()));
  }
  return out;
}

// Every expected tensor is in `file` with its shape, and nothing else is.
template <class T>
void check_tensors(const std::string& path, const std::map<std::string, Shape>& expected, const NamedArrays<T>& file) {
  std::set<std::string> seen;
  for (const auto& [key, value] : file) {
    const std::string name = key.rfind(kPeftPrefix, 0) == 0 ? key.substr(std::string(kPeftPrefix).size()) : "";
    const auto want = expected.find(name);
    if (want == expected.end())
      throw FormatError(detail::concat(kLoad, ": '", path, "': unexpected tensor \"", key,
                                       "\": expected base_model.model.<a targeted module>.lora_{A,B}.weight of ",
                                       "adapter_config.json's target_modules"));
    if (shape_of(value) != want->second)
      throw FormatError(
          detail::concat(kLoad, ": '", path, "': tensor \"", key, "\": expected shape ", shape_text(want->second),
                         " (r from adapter_config.json, the layer's features), got ", shape_text(shape_of(value))));
    seen.insert(name);
  }
  for (const auto& [key, shape] : expected)
    if (!seen.count(key))
      throw FormatError(detail::concat(kLoad, ": '", path, "': missing tensor \"", kPeftPrefix, key, "\" of shape ",
                                       shape_text(shape)));
}

// The names target_modules saves: the given ones, or for all-linear the adapted modules' last parts.
template <class T>
std::vector<std::string> saved_targets(nn::Module<T>& model, const nn::LoraConfig& config) {
  if (!config.all_linear()) return config.target_modules();
  std::set<std::string> names;
  for (const auto& [path, lora] : nn::lora_layers(model)) names.insert(path.substr(path.rfind('.') + 1));
  return {names.begin(), names.end()};
}

nlohmann::json number_json(double x) {
  return x == std::floor(x) && std::fabs(x) < 1e15 ? nlohmann::json(static_cast<long long>(x)) : nlohmann::json(x);
}

}  // namespace

nn::LoraConfig read_peft_config(const std::string& dir, std::string* base_model) {
  const std::string path = hf_file(dir, kConfigFile);
  if (!hf_file_exists(path))
    throw std::runtime_error(detail::concat(kLoad, ": '", path, "' does not exist: a PEFT adapter folder holds ",
                                            kConfigFile, " and ", kWeightsFile));
  const nlohmann::json json = read_hf_json(kLoad, path);
  const JsonValue root(path, json);
  root.expect_object();
  expect_string(root, "peft_type", "LORA");
  expect_string(root, "bias", "none");
  expect_string(root, "task_type", "CAUSAL_LM");
  for (const char* key : kUnsupported)
    if (root.has(key) && !is_off(root.at(key).json()))
      root.at(key).fail_expected("false, null or empty (xgrad does not implement this PEFT option)");
  nn::LoraConfig c;
  c.r(root.at("r").integer<std::int64_t>(1, 1 << 20));
  c.lora_alpha(root.has("lora_alpha") ? root.at("lora_alpha").number() : 8.0);
  c.lora_dropout(root.has("lora_dropout") ? root.at("lora_dropout").number(0.0, 0.999999) : 0.0);
  c.use_rslora(root.has("use_rslora") && root.at("use_rslora").boolean());
  c.target_modules(read_targets(root));
  if (base_model) *base_model = root.has("base_model_name_or_path") ? root.at("base_model_name_or_path").string() : "";
  return c;
}

template <class T>
nn::LoraConfig load_peft_adapter(nn::Module<T>& model, const std::string& dir) {
  const nn::LoraConfig config = read_peft_config(dir);
  const std::string path = hf_file(dir, kWeightsFile);
  for (const auto& [name, lora] : nn::lora_layers(model))
    throw std::invalid_argument(detail::concat(kLoad, ": the model has LoRA layers already ('", name, "')"));
  // Everything is checked before the model is changed.
  const auto expected = expected_tensors(model, config, hf_file(dir, kConfigFile));
  const NamedArrays<T> file = load_safetensors<T>(path);
  check_tensors(path, expected, file);
  nn::inject_lora(model, config);
  nn::StateDict<T> state = model.state_dict();
  nn::StateDict<T> loaded;
  for (const auto& [key, value] : state) {
    const std::string peft_key = kPeftPrefix + key;
    const auto it = std::find_if(file.begin(), file.end(), [&](const auto& kv) { return kv.first == peft_key; });
    loaded.insert(key, it == file.end() ? value : it->second);
  }
  model.load_state_dict(loaded);
  return config;
}

template <class T>
void save_peft_adapter(nn::Module<T>& model, const nn::LoraConfig& config, const std::string& dir,
                       const std::string& base_model_name_or_path) {
  const auto layers = nn::lora_layers(model);
  XGRAD_CHECK(!layers.empty(), "save_peft_adapter: the model has no LoRA layers (nn::inject_lora adds them)");
  std::vector<std::pair<std::string, Array<float>>> tensors;
  for (const auto& [path, lora] : layers) {
    tensors.emplace_back(kPeftPrefix + path + ".lora_A.weight", to_float32(lora->lora_A->weight.value()));
    tensors.emplace_back(kPeftPrefix + path + ".lora_B.weight", to_float32(lora->lora_B->weight.value()));
  }
  nlohmann::json c = {{"base_model_name_or_path", base_model_name_or_path},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"inference_mode", true},
                      {"init_lora_weights", true},
                      {"lora_alpha", number_json(config.lora_alpha())},
                      {"lora_dropout", config.lora_dropout()},
                      {"modules_to_save", nullptr},
                      {"peft_type", "LORA"},
                      {"r", config.r()},
                      {"rank_pattern", nlohmann::json::object()},
                      {"alpha_pattern", nlohmann::json::object()},
                      {"target_modules", saved_targets(model, config)},
                      {"task_type", "CAUSAL_LM"},
                      {"use_dora", false},
                      {"use_rslora", config.use_rslora()}};
  const std::string text = c.dump(2) + "\n";
  write_files_together(dir,
                       {{kConfigFile, [&](std::ostream& out) { out << text; }},
                        {kWeightsFile,
                         [&](std::ostream& out) {
                           write_safetensors(out, tensors, {{"format", "pt"}});
                         }}},
                       "save_peft_adapter");
}

template <class T>
void merge_and_save_hf_llama(LlamaForCausalLM<T>& model, const std::string& dir) {
  nn::merge_lora(model);
  try {
    save_hf_llama(model, nn::base_state_dict(model), dir);
  } catch (...) {
    nn::unmerge_lora(model);
    throw;
  }
  nn::unmerge_lora(model);
}

#define XGRAD_PEFT_INSTANTIATE(T)                                                                                    \
  template nn::LoraConfig load_peft_adapter<T>(nn::Module<T>&, const std::string&);                                  \
  template void save_peft_adapter<T>(nn::Module<T>&, const nn::LoraConfig&, const std::string&, const std::string&); \
  template void merge_and_save_hf_llama<T>(LlamaForCausalLM<T>&, const std::string&);
XGRAD_PEFT_INSTANTIATE(float)
XGRAD_PEFT_INSTANTIATE(double)
#undef XGRAD_PEFT_INSTANTIATE

}  // namespace xgrad::models
