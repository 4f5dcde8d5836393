#include <xgrad/nn/module.hpp>

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace xgrad::nn {

// ---- StateDict ----------------------------------------------------------------------------------

template <class T>
void StateDict<T>::insert(std::string key, Array<T> value) {
  XGRAD_CHECK(!contains(key), "StateDict::insert: duplicate key \"", key, "\"");
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

template <class T>
const Array<T>* StateDict<T>::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

template <class T>
const Array<T>& StateDict<T>::at(const std::string& key) const {
  const Array<T>* v = find(key);
  XGRAD_CHECK(v != nullptr, "StateDict::at: no key \"", key, "\"");
  return *v;
}

template <class T>
Array<T>& StateDict<T>::at(const std::string& key) {
  return const_cast<Array<T>&>(static_cast<const StateDict<T>&>(*this).at(key));
}

template <class T>
std::vector<std::string> StateDict<T>::keys() const {
  std::vector<std::string> k;
  k.reserve(items_.size());
  for (const auto& item : items_) k.push_back(item.first);
  return k;
}

// ---- Module: registration -------------------------------------------------------------------------

template <class T>
Tensor<T> Module<T>::forward(const Tensor<T>&) {
  throw std::invalid_argument(name_ + " has no single-input forward");
}

template <class T>
void Module<T>::check_new_name(const std::string& name, const char* what) const {
  XGRAD_CHECK(!name.empty(), name_, "::", what, ": the name must not be empty");
  XGRAD_CHECK(name.find('.') == std::string::npos, name_, "::", what, ": the name \"", name,
              "\" must not contain \".\"");
  auto taken = [&name](const auto& entries) {
    for (const auto& e : entries)
      if (e.first == name) return true;
    return false;
  };
  XGRAD_CHECK(!taken(parameters_), name_, "::", what, ": \"", name, "\" is already a parameter");
  XGRAD_CHECK(!taken(buffers_), name_, "::", what, ": \"", name, "\" is already a buffer");
  XGRAD_CHECK(!taken(children_), name_, "::", what, ": \"", name, "\" is already a submodule");
}

template <class T>
Tensor<T> Module<T>::register_parameter(const std::string& name, Tensor<T> tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  XGRAD_CHECK(tensor.defined(), name_, "::register_parameter: parameter \"", name, "\" is undefined");
  XGRAD_CHECK(tensor.is_leaf(), name_, "::register_parameter: parameter \"", name,
              "\" must be a leaf tensor, got the result of '", tensor.op(), "' (use detach())");
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

template <class T>
Tensor<T> Module<T>::register_buffer(const std::string& name, Tensor<T> tensor) {
  check_new_name(name, "register_buffer");
  XGRAD_CHECK(tensor.defined(), name_, "::register_buffer: buffer \"", name, "\" is undefined");
  XGRAD_CHECK(!tensor.requires_grad(), name_, "::register_buffer: buffer \"", name,
              "\" must not require grad (register it as a parameter)");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

// ---- traversal --------------------------------------------------------------------------------------

namespace {

// Depth-first: `own(m)` lists m's own entries; every tensor appears once (first occurrence).
template <class T, class Own>
typename Module<T>::template Named<Tensor<T>> walk_tensors(const Module<T>& root, bool recurse, Own own) {
  typename Module<T>::template Named<Tensor<T>> out;
  std::unordered_set<const Node<T>*> seen;
  std::unordered_set<const Module<T>*> visited;
  std::vector<std::pair<std::string, const Module<T>*>> stack{{"", &root}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    if (!visited.insert(m).second) continue;
    for (const auto& [name, t] : own(*m))
      if (seen.insert(t.node().get()).second) out.emplace_back(prefix + name, t);
    if (!recurse) break;
    auto children = m->named_children();
    for (auto it = children.rbegin(); it != children.rend(); ++it)
      stack.emplace_back(prefix + it->first + ".", it->second.get());
  }
  return out;
}

}  // namespace

template <class T>
auto Module<T>::named_parameters(bool recurse) const -> Named<Tensor<T>> {
  return walk_tensors<T>(*this, recurse, [](const Module<T>& m) -> const Named<Tensor<T>>& { return m.parameters_; });
}

template <class T>
std::vector<Tensor<T>> Module<T>::parameters(bool recurse) const {
  std::vector<Tensor<T>> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

template <class T>
auto Module<T>::named_buffers(bool recurse) const -> Named<Tensor<T>> {
  return walk_tensors<T>(*this, recurse, [](const Module<T>& m) -> const Named<Tensor<T>>& { return m.buffers_; });
}

template <class T>
std::vector<Tensor<T>> Module<T>::buffers(bool recurse) const {
  std::vector<Tensor<T>> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

template <class T>
auto Module<T>::named_modules() -> Named<std::shared_ptr<Module<T>>> {
  // A module not owned by a shared_ptr (say, on the stack) is listed through a non-owning one.
  std::shared_ptr<Module<T>> self = this->weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module<T>>(std::shared_ptr<Module<T>>(), this);
  Named<std::shared_ptr<Module<T>>> out;
  std::unordered_set<const Module<T>*> visited;
  std::vector<std::pair<std::string, std::shared_ptr<Module<T>>>> stack{{"", self}};
  while (!stack.empty()) {
    auto [path, m] = stack.back();
    stack.pop_back();
    if (!visited.insert(m.get()).second) continue;
    out.emplace_back(path, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(path.empty() ? it->first : path + "." + it->first, it->second);
  }
  return out;
}

template <class T>
std::vector<std::shared_ptr<Module<T>>> Module<T>::children() const {
  std::vector<std::shared_ptr<Module<T>>> out;
  for (const auto& [name, m] : children_) out.push_back(m);
  return out;
}

// ---- modes and gradients ----------------------------------------------------------------------------

template <class T>
void Module<T>::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

template <class T>
void Module<T>::zero_grad(bool set_to_none) {
  for (auto& t : parameters()) t.zero_grad(set_to_none);
}

// ---- state ---------------------------------------------------------------------------------------

template <class T>
void Module<T>::collect_state(const std::string& prefix, Named<const Tensor<T>*>& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, &t);
  for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, &t);
  for (const auto& [name, m] : children_) m->collect_state(prefix + name + ".", out);
}

template <class T>
StateDict<T> Module<T>::state_dict() const {
  Named<const Tensor<T>*> slots;
  collect_state("", slots);
  StateDict<T> state;
  for (const auto& [key, t] : slots) state.insert(key, t->value());
  return state;
}

template <class T>
LoadStateDictResult Module<T>::load_state_dict(const StateDict<T>& state, bool strict) {
  Named<const Tensor<T>*> slots;
  collect_state("", slots);

  LoadStateDictResult result;
  std::vector<std::string> mismatched;
  std::unordered_set<std::string> expected;
  for (const auto& [key, t] : slots) {
    expected.insert(key);
    const Array<T>* v = state.find(key);
    if (v == nullptr) {
      result.missing_keys.push_back(key);
    } else if (shape_of(*v) != t->shape()) {
      mismatched.push_back("size mismatch for " + key + ": copying a param with shape " + shape_str(v->shape()) +
                           " from checkpoint, the shape in current model is " + shape_str(t->shape()));
    }
  }
  for (const auto& [key, v] : state)
    if (!expected.count(key)) result.unexpected_keys.push_back(key);

  const bool key_errors = strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty());
  if (key_errors || !mismatched.empty()) {
    std::ostringstream msg;
    msg << "Error(s) in loading state_dict for " << name_ << ":";
    auto list = [&msg](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      msg << "\n\t" << what << " key(s) in state_dict: ";
      for (std::size_t i = 0; i < keys.size(); ++i) msg << (i ? ", " : "") << '"' << keys[i] << '"';
      msg << ".";
    };
    if (strict) {
      list("Missing", result.missing_keys);
      list("Unexpected", result.unexpected_keys);
    }
    for (const auto& m : mismatched) msg << "\n\t" << m << ".";
    throw std::invalid_argument(msg.str());
  }

  // Everything checked: copy in place, so every handle to each tensor sees the new values.
  for (const auto& [key, t] : slots) {
    if (const Array<T>* v = state.find(key)) {
      Tensor<T> handle = *t;  // aliases the registered tensor
      std::copy(v->begin(), v->end(), handle.mutable_value().begin());
    }
  }
  return result;
}

template class StateDict<float>;
template class StateDict<double>;
template class Module<float>;
template class Module<double>;

}  // namespace xgrad::nn
