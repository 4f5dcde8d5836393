#include <xgrad/optim/optimizer.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/profiler.hpp>

#include <algorithm>
#include <string>
#include <typeinfo>

namespace xgrad::optim {

// ---- options --------------------------------------------------------------------------------

namespace options_detail {

std::string option_kind(const OptionValue& v) {
  if (std::holds_alternative<double>(v)) return "a number";
  if (std::holds_alternative<bool>(v)) return "a bool";
  return "a tuple of " + std::to_string(std::get<std::vector<double>>(v).size()) + " numbers";
}

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace options_detail

void SavedOptions::set_lr(double lr) {
  for (auto& [name, value] : values_)
    if (name == "lr") {
      value = lr;
      return;
    }
  values_.emplace_back("lr", lr);
}

void SavedOptions::validate() const {
  const double lr = get<double>("lr");
  XGRAD_CHECK(lr >= 0.0, optimizer_, ": invalid learning rate ", lr);
}

// ---- ParamState ---------------------------------------------------------------------------

template <class T>
const Array<T>& ParamState<T>::at(const std::string& name) const {
  auto it = arrays_.find(name);
  if (it == arrays_.end()) {
    std::vector<std::string> held;
    for (const auto& [n, a] : arrays_) held.push_back(n);
    XGRAD_CHECK(false, "ParamState: no array '", name, "' (held: ", held.empty() ? "none" : options_detail::join(held),
                ")");
  }
  return it->second;
}

template <class T>
Array<T>& ParamState<T>::at(const std::string& name) {
  return const_cast<Array<T>&>(static_cast<const ParamState&>(*this).at(name));
}

template <class T>
Array<T>& ParamState<T>::zeros_if_absent(const std::string& name, const Array<T>& like) {
  auto it = arrays_.find(name);
  if (it != arrays_.end()) return it->second;
  return arrays_.emplace(name, full_array<T>(like.shape(), T(0), "optimizer state")).first->second;
}

// ---- ParamGroup ---------------------------------------------------------------------------

template <class T>
ParamGroup<T>::ParamGroup(const ParamGroup& other)
    : initial_lr(other.initial_lr),
      params_(other.params_),
      options_(other.options_ ? other.options_->clone() : nullptr) {}

template <class T>
ParamGroup<T>& ParamGroup<T>::operator=(const ParamGroup& other) {
  if (this != &other) {
    initial_lr = other.initial_lr;
    params_ = other.params_;
    options_ = other.options_ ? other.options_->clone() : nullptr;
  }
  return *this;
}

template <class T>
OptimizerOptions& ParamGroup<T>::options() {
  XGRAD_CHECK(options_ != nullptr, "ParamGroup: this group has no options yet (add it to an optimizer)");
  return *options_;
}

template <class T>
const OptimizerOptions& ParamGroup<T>::options() const {
  XGRAD_CHECK(options_ != nullptr, "ParamGroup: this group has no options yet (add it to an optimizer)");
  return *options_;
}

// ---- Optimizer ----------------------------------------------------------------------------

template <class T>
Optimizer<T>::Optimizer(std::vector<ParamGroup<T>> groups, const OptimizerOptions& defaults)
    : defaults_(defaults.clone()) {
  defaults_->validate();
  bool any = false;
  for (const auto& group : groups) any = any || !group.params().empty();
  XGRAD_CHECK(any, name(), ": optimizer got an empty parameter list");
  for (auto& group : groups) add_param_group(std::move(group));
}

template <class T>
bool Optimizer<T>::contains(const Tensor<T>& param) const {
  for (const auto& group : groups_)
    for (const auto& p : group.params())
      if (p.same(param)) return true;
  return false;
}

template <class T>
void Optimizer<T>::add_param_group(ParamGroup<T> group) {
  if (group.has_options()) {
    const OptimizerOptions& options = group.options();
    const OptimizerOptions& defaults = *defaults_;
    XGRAD_CHECK(std::string(options.optimizer_name()) == name(), name(), ": a parameter group has ",
                options.optimizer_name(), " options; expected ", name(), " options");
    XGRAD_CHECK(typeid(options) == typeid(defaults), name(), ": a parameter group has options of another type ",
                "than the optimizer's (saved options are restored through load_optimizer_state_dict)");
    options.validate();
  } else {
    group.set_options(*defaults_);
  }
  const auto& params = group.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    XGRAD_CHECK(params[i].defined(), name(), ": parameter ", i, " of the group is undefined");
    XGRAD_CHECK(params[i].is_leaf(), name(), ": can't optimize a non-leaf Tensor (parameter ", i,
                " of the group was produced by '", params[i].op(), "')");
    for (std::size_t j = 0; j < i; ++j)
      XGRAD_CHECK(!params[j].same(params[i]), name(), ": parameter ", i,
                  " appears twice in the same parameter group");
    XGRAD_CHECK(!contains(params[i]), name(), ": some parameters appear in more than one parameter group");
  }
  groups_.push_back(std::move(group));
}

template <class T>
void Optimizer<T>::step() {
  // torch.profiler's name for it: "Optimizer.step#Adam.step".
  const profiler::RecordFunction profiled(profiler::detail::on() ? "Optimizer.step#" + std::string(name()) + ".step"
                                                                 : std::string());
  // step_group reads the options as the optimizer's own type: set_options can have changed them.
  const OptimizerOptions& defaults = *defaults_;
  for (const auto& group : groups_) {
    const OptimizerOptions& options = group.options();
    XGRAD_CHECK(typeid(options) == typeid(defaults), name(), ": a parameter group's options were replaced by ",
                "options of another type (", options.optimizer_name(), ")");
  }
  for (auto& group : groups_) step_group(group);
}

template <class T>
Tensor<T> Optimizer<T>::step(const std::function<Tensor<T>()>& closure) {
  Tensor<T> loss;
  {
    const bool previous = is_grad_enabled();
    set_grad_enabled(true);
    try {
      loss = closure();
    } catch (...) {
      set_grad_enabled(previous);
      throw;
    }
    set_grad_enabled(previous);
  }
  step();
  return loss;
}

template <class T>
void Optimizer<T>::zero_grad(bool set_to_none) {
  const profiler::RecordFunction profiled(
      profiler::detail::on() ? "Optimizer.zero_grad#" + std::string(name()) + ".zero_grad" : std::string());
  for (auto& group : groups_)
    for (auto& p : group.params()) p.zero_grad(set_to_none);
}

template <class T>
std::vector<Tensor<T>> Optimizer<T>::parameters() const {
  std::vector<Tensor<T>> all;
  for (const auto& group : groups_) all.insert(all.end(), group.params().begin(), group.params().end());
  return all;
}

template <class T>
std::vector<ParamState<T>> Optimizer<T>::state() const {
  std::vector<ParamState<T>> all;
  for (const auto& group : groups_)
    for (const auto& p : group.params()) {
      auto it = state_.find(p.node());
      all.push_back(it == state_.end() ? ParamState<T>{} : it->second);
    }
  return all;
}

template <class T>
void Optimizer<T>::check_state(const Tensor<T>& param, const ParamState<T>& state) const {
  XGRAD_CHECK(state.step >= 0, name(), ": state step must be non-negative, got ", state.step);
  const std::vector<std::string> declared = state_names();
  const auto declares = [&](const std::string& entry) {
    return std::find(declared.begin(), declared.end(), entry) != declared.end();
  };
  XGRAD_CHECK(state.step == 0 || declares("step"), name(), ": state step ", state.step, ", but ", name(),
              " counts no steps (its state holds ", options_detail::join(declared), ")");
  const Shape shape = param.shape();
  for (const auto& [entry, array] : state.arrays()) {
    XGRAD_CHECK(entry != "step" && declares(entry), name(), ": state has an array '", entry, "'; ", name(),
                "'s state holds ", options_detail::join(declared));
    XGRAD_CHECK(shape_of(array) == shape, name(), ": state '", entry, "' has shape ", shape_of(array),
                " but its parameter has shape ", shape);
  }
}

template <class T>
void Optimizer<T>::set_state(const std::vector<ParamState<T>>& state) {
  const std::vector<Tensor<T>> params = parameters();
  XGRAD_CHECK(state.size() == params.size(), name(), ": expected the state of ", params.size(),
              " parameters, got ", state.size());
  for (std::size_t i = 0; i < params.size(); ++i) check_state(params[i], state[i]);
  // Validated first, so that a bad entry leaves the current state untouched.
  state_.clear();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!state[i].empty()) state_[params[i].node()] = state[i];
}

template <class T>
ParamState<T> Optimizer<T>::state(const Tensor<T>& param) const {
  XGRAD_CHECK(param.defined() && contains(param), name(), ": the tensor is not a parameter of this optimizer");
  auto it = state_.find(param.node());
  return it == state_.end() ? ParamState<T>{} : it->second;
}

template <class T>
void Optimizer<T>::set_state(const Tensor<T>& param, ParamState<T> state) {
  XGRAD_CHECK(param.defined() && contains(param), name(), ": the tensor is not a parameter of this optimizer");
  check_state(param, state);
  if (state.empty()) state_.erase(param.node());
  else state_[param.node()] = std::move(state);
}

template class ParamState<float>;
template class ParamState<double>;
template class ParamGroup<float>;
template class ParamGroup<double>;
template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace xgrad::optim
