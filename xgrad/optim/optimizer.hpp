// The optimizer base (torch.optim.Optimizer, as of PyTorch 1.13): parameters in one or more
// groups, each group with its own options; step(), zero_grad(), and a per-parameter state
// (momentum buffers, moments, step count) that the serializer saves and restores.
//
//   optim::Adam<double> opt({
//       optim::ParamGroup<double>(encoder_params),                               // defaults
//       optim::ParamGroup<double>(head_params, optim::AdamOptions().lr(1e-2))},  // own options
//     optim::AdamOptions().lr(1e-3));
//   loss.backward(); opt.step(); opt.zero_grad();
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include <xgrad/autograd/tensor.hpp>
#include <xgrad/arg.hpp>

namespace xgrad::optim {

// What every optimizer's options have in common, so that a group's options can be stored
// without knowing the optimizer, and schedules can read and write any group's learning rate.
class OptimizerOptions {
 public:
  virtual ~OptimizerOptions() = default;
  virtual std::unique_ptr<OptimizerOptions> clone() const = 0;
  virtual double get_lr() const = 0;
  virtual void set_lr(double lr) = 0;
  // Throws std::invalid_argument naming the optimizer and the bad value.
  virtual void validate() const = 0;
  // "SGD", "Adam", "AdamW": the optimizer these options belong to.
  virtual const char* optimizer_name() const = 0;
};

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

// One parameter's optimizer state. Absent entries have not been created yet (as torch creates
// them lazily at the first step that sees a gradient).
template <class T = float>
struct ParamState {
  std::int64_t step = 0;                    // Adam/AdamW: steps taken (torch's state['step'])
  std::optional<Array<T>> momentum_buffer;  // SGD with momentum
  std::optional<Array<T>> exp_avg;          // Adam/AdamW: first moment m
  std::optional<Array<T>> exp_avg_sq;       // Adam/AdamW: second moment v
  std::optional<Array<T>> max_exp_avg_sq;   // Adam/AdamW with amsgrad: running max of v

  bool empty() const {
    return step == 0 && !momentum_buffer && !exp_avg && !exp_avg_sq && !max_exp_avg_sq;
  }
};

template <class T = float>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; the others are skipped.
  void step();
  // Evaluates the closure with grad mode on (it should zero the grads, compute the loss and
  // call backward), then steps; returns the closure's loss.
  Tensor<T> step(const std::function<Tensor<T>()>& closure);

  // PyTorch 1.13's default zeros the gradients; set_to_none forgets them, so that the next step
  // skips parameters that get no new gradient.
  void zero_grad(bool set_to_none = false);

  // Validates the group's options (or gives it the defaults) and rejects parameters that are
  // undefined, non-leaf, or already in a group.
  void add_param_group(ParamGroup<T> group);

  std::vector<ParamGroup<T>>& param_groups() { return groups_; }
  const std::vector<ParamGroup<T>>& param_groups() const { return groups_; }
  const OptimizerOptions& defaults() const { return *defaults_; }
  const char* name() const { return defaults_->optimizer_name(); }

  // Every parameter, group by group, in order: the order of state() and set_state().
  std::vector<Tensor<T>> parameters() const;

  // The state of every parameter in parameters() order (empty for one never stepped).
  std::vector<ParamState<T>> state() const;
  // Replaces the whole state; one entry per parameter in parameters() order, each present
  // array of its parameter's shape.
  void set_state(const std::vector<ParamState<T>>& state);
  // The state of one parameter of this optimizer (empty if never stepped).
  ParamState<T> state(const Tensor<T>& param) const;
  void set_state(const Tensor<T>& param, ParamState<T> state);

 protected:
  Optimizer(std::vector<ParamGroup<T>> groups, const OptimizerOptions& defaults);

  // Updates the parameters of one group whose options are this optimizer's.
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

extern template class ParamGroup<float>;
extern template class ParamGroup<double>;
extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace xgrad::optim
