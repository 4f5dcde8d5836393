// The model_type -> family table behind load_hf_causal_lm.
#include <xgrad/models/hf_causal_lm.hpp>

#include <algorithm>

#include <xgrad/base/json_input.hpp>
#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/serialize/format_error.hpp>
#include <xgrad/serialize/hf_folder.hpp>

namespace xgrad::models {

namespace {

constexpr const char* kLoad = "load_hf_causal_lm";

// "gpt2", "llama", ... as the error messages list them.
std::string listed(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "\"" : ", \"") + n + "\"";
  return s;
}

}  // namespace

const std::vector<std::string>& hf_causal_lm_model_types() {
  static const std::vector<std::string> types = {"gpt2", "llama", "qwen2", "mistral"};
  return types;
}

std::string read_hf_model_type(const std::string& dir) {
  const nlohmann::json config = read_hf_config(kLoad, dir);  // JsonValue refers to it
  const JsonValue root(detail::concat(kLoad, ": '", hf_file(dir, "config.json"), "'"), config);
  if (!root.is_object()) root.fail_expected("a JSON object");
  const std::string supported = listed(hf_causal_lm_model_types());
  if (!root.has("model_type")) root.fail("no \"model_type\": xgrad reads " + supported);
  const std::string type = root.at("model_type").string();
  const auto& types = hf_causal_lm_model_types();
  if (std::find(types.begin(), types.end(), type) == types.end())
    root.at("model_type").fail(detail::concat(describe_json(nlohmann::json(type)), ": xgrad reads ", supported));
  return type;
}

template <class T>
HFCausalLM<T> load_hf_causal_lm(const std::string& dir) {
  HFCausalLM<T> lm;
  lm.model_type = read_hf_model_type(dir);
  if (lm.model_type == "gpt2")
    lm.model = load_hf_gpt2<T>(dir);
  else
    lm.model = load_hf_llama<T>(dir);  // llama, qwen2, mistral
  return lm;
}

template <class T>
void save_hf_causal_lm(const HFCausalLM<T>& lm, const std::string& dir) {
  if (const auto gpt = lm.template as<GPT<T>>())
    save_hf_gpt2(*gpt, dir);
  else
    save_hf_llama(*lm.template as<LlamaForCausalLM<T>>(), dir);
}

template HFCausalLM<float> load_hf_causal_lm<float>(const std::string&);
template HFCausalLM<double> load_hf_causal_lm<double>(const std::string&);
template void save_hf_causal_lm<float>(const HFCausalLM<float>&, const std::string&);
template void save_hf_causal_lm<double>(const HFCausalLM<double>&, const std::string&);

}  // namespace xgrad::models
