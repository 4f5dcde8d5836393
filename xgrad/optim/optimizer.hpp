// The optimizer base (torch.optim.Optimizer, as of PyTorch 1.13): parameters in one or more
// groups, each group with its own options; step(), zero_grad(), and a per-parameter state
// (momentum buffers, moments, step count) that the serializer saves and restores.
//
// compile: snippet given: std::vector<Tensor<double>> encoder_params, head_params; Tensor<double> loss;
//   optim::Adam<double> opt({
//       optim::ParamGroup<double>(encoder_params),                               // defaults
//       optim::ParamGroup<double>(head_params, optim::AdamOptions().lr(1e-2))},  // own options
//     optim::AdamOptions().lr(1e-3));
//   loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/arg.hpp>

namespace xgrad::optim {

// One option as torch's param_groups hold it: a number, a flag, or a tuple of numbers (betas).
using OptionValue = std::variant<double, bool, std::vector<double>>;
// Options by torch's names, in the order the optimizer declares them.
using OptionValues = std::vector<std::pair<std::string, OptionValue>>;

namespace options_detail {
// The C++ types an option may have, to and from OptionValue; from_option_value returns false
// when the value is of another kind (or a tuple of another length).
inline OptionValue to_option_value(double x) { return x; }
inline OptionValue to_option_value(bool b) { return b; }
template <std::size_t N>
OptionValue to_option_value(const std::array<double, N>& a) {
  return std::vector<double>(a.begin(), a.end());
}
inline bool from_option_value(const OptionValue& v, double& out) {
  const double* x = std::get_if<double>(&v);
  if (x != nullptr) out = *x;
  return x != nullptr;
}
inline bool from_option_value(const OptionValue& v, bool& out) {
  const bool* b = std::get_if<bool>(&v);
  if (b != nullptr) out = *b;
  return b != nullptr;
}
template <std::size_t N>
bool from_option_value(const OptionValue& v, std::array<double, N>& out) {
  const auto* t = std::get_if<std::vector<double>>(&v);
  if (t == nullptr || t->size() != N) return false;
  std::copy(t->begin(), t->end(), out.begin());
  return true;
}
// "a number", "a bool", "a tuple of 2 numbers": for messages.
std::string option_kind(const OptionValue& v);
// "a, b, c"
std::string join(const std::vector<std::string>& names);
}  // namespace options_detail

// What every optimizer's options have in common, so that a group's options can be stored
// without knowing the optimizer, schedules can read and write any group's learning rate, and
// serialize can write and read any optimizer's options as named values.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // Throws std::invalid_argument naming the optimizer and the bad value.
  virtual void validate() const = 0;
  // "SGD", "Adam", "AdamW", "RMSprop": the optimizer these options belong to.
  virtual const char* optimizer_name() const = 0;
  // Every option under torch's name, in declaration order (torch's param_groups entries).
  virtual OptionValues values() const = 0;
  // Sets every option from `values`, which must name exactly these options, each with a value of
  // the same kind; otherwise throws std::invalid_argument saying what differs and changes nothing.
  // Does not validate.
  virtual void set_values(const OptionValues& values) = 0;

  // One option by name, as torch's group["betas"]: get<double>("lr"), get<bool>("amsgrad"),
  // get<Betas>("betas"). Throws std::invalid_argument if there is none of that name and kind.
  template <class V>
  V get(const std::string& name) const;
};

// XGRAD_OPTIONS(Self) opens an options class; each XGRAD_OPTION(type, name) after it declares one
// option once: the chained setter and getter (as XGRAD_ARG), the stored field with its default
// right after the macro, and its place in the list that values(), set_values() and so the
// serializer go through. An option cannot be declared without being saved and restored.
//
//   class FooOptions : public OptionsBase<FooOptions> {
//     XGRAD_OPTIONS(FooOptions)
//     XGRAD_OPTION(double, lr) = 1e-2;
//     XGRAD_OPTION(bool, maximize) = false;
//    public:
//     const char* optimizer_name() const override { return "Foo"; }
//     void validate() const override;
//   };
//
// Options may be double, bool or std::array<double, N>; there must be one named "lr". Self is the
// type the setters return (a class template shared by two optimizers passes its CRTP parameter).
// The options are numbered with __COUNTER__ from XGRAD_OPTIONS on, so nothing else in the class
// body between them may use __COUNTER__.
#define XGRAD_OPTIONS(SELF)                                                                        \
 public:                                                                                           \
  using xgrad_options_self = SELF;                                                                 \
  static constexpr int xgrad_option_base = __COUNTER__;                                            \
  template <class XgradS, class XgradF, int XgradI>                                                \
  static std::false_type xgrad_option_visit(XgradS&, XgradF&, std::integral_constant<int, XgradI>) { \
    return {};                                                                                     \
  }

#define XGRAD_OPTION(TYPE, NAME)                                                                   \
 public:                                                                                           \
  inline xgrad_options_self& NAME(TYPE new_##NAME) {                                               \
    this->NAME##_ = std::move(new_##NAME);                                                         \
    return static_cast<xgrad_options_self&>(*this);                                                \
  }                                                                                                \
  inline const TYPE& NAME() const noexcept { return this->NAME##_; }                               \
  template <class XgradS, class XgradF>                                                            \
  static std::true_type xgrad_option_visit(                                                        \
      XgradS& self, XgradF& f, std::integral_constant<int, __COUNTER__ - xgrad_option_base - 1>) { \
    f(#NAME, self.NAME##_);                                                                        \
    return {};                                                                                     \
  }                                                                                                \
                                                                                                   \
 private:                                                                                          \
  TYPE NAME##_

// The OptimizerOptions of an options class declared with XGRAD_OPTIONS / XGRAD_OPTION.
template <class Derived>
class OptionsBase : public OptimizerOptions {
 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<Derived>(self()); }
  double get_lr() const override { return self().lr(); }
  void set_lr(double lr) override { static_cast<Derived&>(*this).lr(lr); }
  OptionValues values() const override {
    OptionValues all;
    fields(self(), [&](const char* name, const auto& field) {
      all.emplace_back(name, options_detail::to_option_value(field));
    });
    return all;
  }
  void set_values(const OptionValues& values) override;

  // Calls f(name, field) for every option of `self` (a Derived, const or not), in declaration order.
  template <class Self, class F>
  static void fields(Self& self, F&& f) {
    visit_from<0>(self, f);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
  template <int I, class Self, class F>
  static void visit_from(Self& self, F& f) {
    using Index = std::integral_constant<int, I>;
    if constexpr (decltype(Derived::xgrad_option_visit(self, f, Index{}))::value) {
      Derived::xgrad_option_visit(self, f, Index{});
      visit_from<I + 1>(self, f);
    }
  }
};

// Options of any optimizer as plain named values, as an archive holds them (serialize's
// load_optimizer_state gives these); load_optimizer_state_dict turns them into the optimizer's own
// options. They cannot be given to an optimizer directly.
class SavedOptions : public OptimizerOptions {
 public:
  SavedOptions(std::string optimizer, OptionValues values)
      : optimizer_(std::move(optimizer)), values_(std::move(values)) {}
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SavedOptions>(*this); }
  double get_lr() const override { return get<double>("lr"); }
  void set_lr(double lr) override;
  // Only what every torch optimizer requires: a number "lr" >= 0 ("Invalid learning rate").
  void validate() const override;
  const char* optimizer_name() const override { return optimizer_.c_str(); }
  OptionValues values() const override { return values_; }
  void set_values(const OptionValues& values) override { values_ = values; }

 private:
  std::string optimizer_;
  OptionValues values_;
};

template <class V>
V OptimizerOptions::get(const std::string& name) const {
  const OptionValues all = values();
  for (const auto& [n, v] : all) {
    if (n != name) continue;
    V out{};
    XGRAD_CHECK(options_detail::from_option_value(v, out), optimizer_name(), ": option '", name, "' is ",
                options_detail::option_kind(v), ", not of the type asked for");
    return out;
  }
  XGRAD_CHECK(false, optimizer_name(), ": no option '", name, "'");
  return V{};
}

template <class Derived>
void OptionsBase<Derived>::set_values(const OptionValues& values) {
  Derived result = self();
  std::vector<std::string> names;
  fields(self(), [&](const char* name, const auto&) { names.emplace_back(name); });
  for (std::size_t i = 0; i < values.size(); ++i) {
    XGRAD_CHECK(std::find(names.begin(), names.end(), values[i].first) != names.end(), optimizer_name(),
                ": unknown option '", values[i].first, "' (", optimizer_name(), " has ", options_detail::join(names),
                ")");
    for (std::size_t j = 0; j < i; ++j)
      XGRAD_CHECK(values[j].first != values[i].first, optimizer_name(), ": option '", values[i].first,
                  "' given twice");
  }
  fields(result, [&](const char* name, auto& field) {
    auto it = std::find_if(values.begin(), values.end(), [&](const auto& v) { return v.first == name; });
    XGRAD_CHECK(it != values.end(), optimizer_name(), ": option '", name, "' is missing");
    XGRAD_CHECK(options_detail::from_option_value(it->second, field), optimizer_name(), ": option '", name,
                "' should be ", options_detail::option_kind(options_detail::to_option_value(field)), ", got ",
                options_detail::option_kind(it->second));
  });
  static_cast<Derived&>(*this) = result;
}

// A list of parameters optimized with the same options (a dict of torch's `param_groups`).
// Without options of its own, a group takes the optimizer's defaults when it is added.
template <class T = float>
class ParamGroup {
 public:
  explicit ParamGroup(std::vector<Tensor<T>> params) : params_(std::move(params)) {}
  ParamGroup(std::vector<Tensor<T>> params, const OptimizerOptions& options)
      : params_(std::move(params)), options_(options.clone()) {}
  ParamGroup(const ParamGroup& other);
  ParamGroup& operator=(const ParamGroup& other);
  ParamGroup(ParamGroup&&) noexcept = default;
  ParamGroup& operator=(ParamGroup&&) noexcept = default;

  std::vector<Tensor<T>>& params() { return params_; }
  const std::vector<Tensor<T>>& params() const { return params_; }

  bool has_options() const { return options_ != nullptr; }
  OptimizerOptions& options();
  const OptimizerOptions& options() const;
  void set_options(const OptimizerOptions& options) { options_ = options.clone(); }

  // The learning rate the first schedule saw (torch's group['initial_lr']): schedules compute
  // from it, and one constructed with last_epoch != -1 requires it.
  std::optional<double> initial_lr;

 private:
  std::vector<Tensor<T>> params_;
  std::unique_ptr<OptimizerOptions> options_;
};

// One parameter's optimizer state, as torch.optim.Optimizer.state_dict()["state"][i] holds it:
// a step count and named arrays (Adam: step, exp_avg, exp_avg_sq, max_exp_avg_sq; SGD:
// momentum_buffer). Each optimizer declares its entries (Optimizer::state_names). Arrays not
// present have not been created yet (torch creates them lazily at the first step with a
// gradient). Arrays are kept sorted by name.
template <class T = float>
class ParamState {
 public:
  std::int64_t step = 0;  // torch's state["step"]: updates taken, for optimizers that count them

  bool has(const std::string& name) const { return arrays_.count(name) != 0; }
  // Throws std::invalid_argument naming the arrays held.
  const Array<T>& at(const std::string& name) const;
  Array<T>& at(const std::string& name);
  // Inserts or replaces; returns the stored array.
  Array<T>& set(const std::string& name, Array<T> value) { return arrays_[name] = std::move(value); }
  // The array, created as zeros of like's shape if absent (torch.zeros_like(p)).
  Array<T>& zeros_if_absent(const std::string& name, const Array<T>& like);
  void erase(const std::string& name) { arrays_.erase(name); }
  const std::map<std::string, Array<T>>& arrays() const { return arrays_; }

  bool empty() const { return step == 0 && arrays_.empty(); }

 private:
  std::map<std::string, Array<T>> arrays_;
};

template <class T = float>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; the others are skipped (their values and
  // state stay as they are).
  void step();
  // Evaluates the closure with grad mode on (it should zero the grads, compute the loss and
  // call backward), then steps; returns the closure's loss.
  Tensor<T> step(const std::function<Tensor<T>()>& closure);

  // Forgets the gradients (PyTorch 2's default), so that the next step skips parameters that get
  // no new gradient and backward writes fresh ones instead of adding to zeros; set_to_none=false
  // keeps them as zeros (PyTorch 1.13's default), and the next step then updates every parameter.
  void zero_grad(bool set_to_none = true);

  // Validates the group's options (or gives it the defaults) and rejects parameters that are
  // undefined, non-leaf, or already in a group.
  void add_param_group(ParamGroup<T> group);

  std::vector<ParamGroup<T>>& param_groups() { return groups_; }
  const std::vector<ParamGroup<T>>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  const char* name() const { return defaults_->optimizer_name(); }

  // The entries of a parameter's state, as torch names them: "step" if the optimizer counts
  // steps, then its arrays (Adam: {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}).
  virtual std::vector<std::string> state_names() const = 0;

  // Every parameter, group by group, in order: the order of state() and set_state().
  std::vector<Tensor<T>> parameters() const;

  // The state of every parameter in parameters() order (empty for one never stepped).
  std::vector<ParamState<T>> state() const;
  // Replaces the whole state; one entry per parameter in parameters() order, each array one of
  // state_names() and of its parameter's shape.
  void set_state(const std::vector<ParamState<T>>& state);
  // The state of one parameter of this optimizer (empty if never stepped).
  ParamState<T> state(const Tensor<T>& param) const;
  void set_state(const Tensor<T>& param, ParamState<T> state);

 protected:
  Optimizer(std::vector<ParamGroup<T>> groups, const OptimizerOptions& defaults);

  // Updates the parameters of one group; its options are of the type of defaults() (step() checks).
  virtual void step_group(ParamGroup<T>& group) = 0;

  // The state of a parameter, created empty on first use.
  ParamState<T>& state_of(const Tensor<T>& param) { return state_[param.node()]; }

 private:
  void check_state(const Tensor<T>& param, const ParamState<T>& state) const;
  bool contains(const Tensor<T>& param) const;

  std::unique_ptr<OptimizerOptions> defaults_;
  std::vector<ParamGroup<T>> groups_;
  std::unordered_map<std::shared_ptr<Node<T>>, ParamState<T>> state_;
};

extern template class ParamState<float>;
extern template class ParamState<double>;
extern template class ParamGroup<float>;
extern template class ParamGroup<double>;
extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace xgrad::optim
