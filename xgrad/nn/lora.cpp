#include <xgrad/nn/lora.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/ops/lora_linear.hpp>

namespace xgrad::nn {

namespace {

void check_config(const LoraConfig& c) {
  XGRAD_CHECK(c.r() >= 1, "inject_lora: expected r >= 1, got ", c.r());
  XGRAD_CHECK(std::isfinite(c.lora_alpha()), "inject_lora: expected a finite lora_alpha, got ", c.lora_alpha());
  XGRAD_CHECK(c.lora_dropout() >= 0 && c.lora_dropout() < 1, "inject_lora: expected 0 <= lora_dropout < 1, got ",
              c.lora_dropout());
  XGRAD_CHECK(!c.target_modules().empty(), "inject_lora: expected target_modules (names such as q_proj, or ",
              "all-linear), got none");
}

// Whether the module at dotted `path` is one of `target`'s: the name itself or its last parts.
bool matches(const std::string& path, const std::string& target) {
  if (path == target) return true;
  return path.size() > target.size() && path.compare(path.size() - target.size(), target.size(), target) == 0 &&
         path[path.size() - target.size() - 1] == '.';
}

bool is_output_layer(const std::string& path) { return path == "lm_head" || matches(path, "lm_head"); }

template <class T>
std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> linears(Module<T>& model) {
  std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> out;
  for (const auto& [path, m] : model.named_modules())
    if (auto linear = std::dynamic_pointer_cast<Linear<T>>(m)) out.emplace_back(path, linear);
  return out;
}

}  // namespace

double LoraConfig::scaling() const {
  return use_rslora_ ? lora_alpha_ / std::sqrt(double(r_)) : lora_alpha_ / double(r_);
}

template <class T>
LoraLayer<T>::LoraLayer(Linear<T>& base, const LoraConfig& config)
    : LinearAdapter<T>("LoraLayer"), base_weight_(base.weight), scaling_(config.scaling()) {
  const std::int64_t in = base.options().in_features(), out = base.options().out_features();
  if (config.lora_dropout() > 0)
    lora_dropout = base.register_module("lora_dropout", std::make_shared<Dropout<T>>(config.lora_dropout()));
  lora_A = base.register_module("lora_A", std::make_shared<Linear<T>>(LinearOptions(in, config.r()).bias(false)));
  lora_B = base.register_module("lora_B", std::make_shared<Linear<T>>(LinearOptions(config.r(), out).bias(false)));
  NoGradGuard no_grad;
  lora_B->weight.mutable_value().fill(T(0));
}

template <class T>
Tensor<T> LoraLayer<T>::forward_linear(const Tensor<T>& input, const Tensor<T>& weight, const Tensor<T>& bias) {
  if (merged_) return linear(input, weight, bias);
  if (!lora_dropout || !lora_dropout->is_training())
    return detail::lora_linear(input, weight, bias, lora_A->weight, lora_B->weight, scaling_);
  const Tensor<T> base = linear(input, weight, bias);
  const Tensor<T> u = linear(lora_dropout->forward(input), lora_A->weight);
  // Scaling B (out, r) rather than the product (*, out) keeps one activation of the layer's
  // output size fewer per step.
  return base + linear(u, lora_B->weight * T(scaling_));
}

template <class T>
Array<T> LoraLayer<T>::delta_weight() const {
  const Array<T>& a = lora_A->weight.value();  // (r, in)
  const Array<T>& b = lora_B->weight.value();  // (out, r)
  const std::size_t r = a.shape()[0], in = a.shape()[1], out = b.shape()[0];
  Array<T> delta = full_array<T>(Shape{out, in}, T(0), "merge_lora");
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t k = 0; k < r; ++k) {
      const T bk = T(scaling_) * b.data()[o * r + k];
      const T* arow = a.data() + k * in;
      T* drow = delta.data() + o * in;
      for (std::size_t i = 0; i < in; ++i) drow[i] += bk * arow[i];
    }
  return delta;
}

template <class T>
void LoraLayer<T>::merge() {
  XGRAD_CHECK(!merged_, "LoraLayer::merge: already merged");
  const Array<T> delta = delta_weight();
  Array<T>& w = base_weight_.mutable_value();
  std::transform(w.begin(), w.end(), delta.begin(), w.begin(), [](T x, T d) { return x + d; });
  merged_ = true;
}

template <class T>
void LoraLayer<T>::unmerge() {
  XGRAD_CHECK(merged_, "LoraLayer::unmerge: not merged");
  const Array<T> delta = delta_weight();
  Array<T>& w = base_weight_.mutable_value();
  std::transform(w.begin(), w.end(), delta.begin(), w.begin(), [](T x, T d) { return x - d; });
  merged_ = false;
}

template <class T>
std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> lora_targets(Module<T>& model,
                                                                             const LoraConfig& config) {
  check_config(config);
  const auto candidates = linears(model);
  std::vector<bool> chosen(candidates.size(), false);
  for (const std::string& target : config.target_modules()) {
    bool found = false;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const std::string& path = candidates[i].first;
      const bool hit = config.all_linear() ? !is_output_layer(path) : matches(path, target);
      if (!hit) continue;
      XGRAD_CHECK(!candidates[i].second->adapter(), "inject_lora: the Linear '", path, "' has an adapter already");
      chosen[i] = found = true;
    }
    XGRAD_CHECK(found, "inject_lora: target_modules entry '", target,
                "' matches no Linear of the model (expected the last part(s) of a Linear's name, such as q_proj)");
  }
  std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> out;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (chosen[i]) out.push_back(candidates[i]);
  return out;
}

template <class T>
std::vector<std::string> inject_lora(Module<T>& model, const LoraConfig& config) {
  const auto targets = lora_targets(model, config);  // before any lora_A / lora_B joins the Linears
  for (auto& p : model.parameters()) p.requires_grad_(false);
  std::vector<std::string> names;
  for (const auto& [path, linear] : targets) {
    linear->set_adapter(std::make_shared<LoraLayer<T>>(*linear, config));
    names.push_back(path);
  }
  return names;
}

template <class T>
std::vector<std::pair<std::string, std::shared_ptr<LoraLayer<T>>>> lora_layers(Module<T>& model) {
  std::vector<std::pair<std::string, std::shared_ptr<LoraLayer<T>>>> out;
  for (const auto& [path, linear] : linears(model))
    if (auto lora = std::dynamic_pointer_cast<LoraLayer<T>>(linear->adapter())) out.emplace_back(path, lora);
  return out;
}

template <class T>
void merge_lora(Module<T>& model) {
  for (auto& [path, lora] : lora_layers(model)) lora->merge();
}

template <class T>
void unmerge_lora(Module<T>& model) {
  for (auto& [path, lora] : lora_layers(model)) lora->unmerge();
}

template <class T>
StateDict<T> trainable_state_dict(const Module<T>& model) {
  StateDict<T> out;
  for (const auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) out.insert(name, p.value());
  return out;
}

template <class T>
StateDict<T> base_state_dict(Module<T>& model) {
  std::set<std::string> lora_keys;
  for (const auto& [path, lora] : lora_layers(model))
    for (const char* part : {".lora_A.weight", ".lora_B.weight"}) lora_keys.insert(path + part);
  StateDict<T> out;
  for (const auto& [name, value] : model.state_dict())
    if (!lora_keys.count(name)) out.insert(name, value);
  return out;
}

namespace {

template <class T>
class TrainableView : public Module<T> {
 public:
  explicit TrainableView(Module<T>& model) : Module<T>("TrainableView"), model_(model) {}
  void train(bool on = true) override {
    Module<T>::train(on);
    model_.train(on);
  }

 private:
  Module<T>& model_;
};

// The child `name` of `parent`, made empty when absent.
template <class T>
Module<T>& child(Module<T>& parent, const std::string& name) {
  for (const auto& [n, m] : parent.named_children())
    if (n == name) return *m;
  return *parent.register_module(name, std::make_shared<Module<T>>("Module"));
}

}  // namespace

template <class T>
std::shared_ptr<Module<T>> trainable_view(Module<T>& model) {
  auto view = std::make_shared<TrainableView<T>>(model);
  for (const auto& [name, p] : model.named_parameters()) {
    if (!p.requires_grad()) continue;
    Module<T>* at = view.get();
    std::size_t begin = 0;
    for (std::size_t dot; (dot = name.find('.', begin)) != std::string::npos; begin = dot + 1)
      at = &child(*at, name.substr(begin, dot - begin));
    at->register_parameter(name.substr(begin), p);
  }
  return view;
}

template class LoraLayer<float>;
template class LoraLayer<double>;
#define XGRAD_LORA_INSTANTIATE(T)                                                                              \
  template std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> lora_targets<T>(Module<T>&,         \
                                                                                           const LoraConfig&); \
  template std::vector<std::string> inject_lora<T>(Module<T>&, const LoraConfig&);                             \
  template std::vector<std::pair<std::string, std::shared_ptr<LoraLayer<T>>>> lora_layers<T>(Module<T>&);      \
  template void merge_lora<T>(Module<T>&);                                                                     \
  template void unmerge_lora<T>(Module<T>&);                                                                   \
  template StateDict<T> trainable_state_dict<T>(const Module<T>&);                                             \
  template StateDict<T> base_state_dict<T>(Module<T>&);                                                        \
  template std::shared_ptr<Module<T>> trainable_view<T>(Module<T>&);
XGRAD_LORA_INSTANTIATE(float)
XGRAD_LORA_INSTANTIATE(double)
#undef XGRAD_LORA_INSTANTIATE

}  // namespace xgrad::nn
