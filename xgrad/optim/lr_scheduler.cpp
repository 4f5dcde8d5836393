// Each get_lr mirrors torch 1.13's expression term by term (Python evaluates left to right), so
// that the sequences agree with PyTorch's to the last bits.
#include <xgrad/optim/lr_scheduler.hpp>

#include <algorithm>
#include <cmath>

namespace xgrad::optim {

namespace {
constexpr double kPi = 3.141592653589793;  // math.pi
}

// ---- LRScheduler ----------------------------------------------------------------------------

template <class T>
LRScheduler<T>::LRScheduler(Optimizer<T>& optimizer, int last_epoch, const char* name)
    : optimizer_(optimizer), name_(name), last_epoch_(last_epoch) {
  auto& groups = optimizer.param_groups();
  if (last_epoch == -1) {
    for (auto& group : groups)
      if (!group.initial_lr) group.initial_lr = group.options().get_lr();
  } else {
    for (std::size_t i = 0; i < groups.size(); ++i)
      XGRAD_CHECK(groups[i].initial_lr.has_value(), name, ": param 'initial_lr' is not specified in param_groups[",
                  i, "] when resuming an optimizer (last_epoch ", last_epoch, ")");
  }
  for (const auto& group : groups) base_lrs_.push_back(*group.initial_lr);
}

template <class T>
std::vector<double> LRScheduler<T>::group_lrs() const {
  std::vector<double> lrs;
  for (const auto& group : optimizer_.param_groups()) lrs.push_back(group.options().get_lr());
  return lrs;
}

template <class T>
void LRScheduler<T>::apply(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  XGRAD_CHECK(lrs.size() == groups.size(), name_, ": the optimizer has ", groups.size(),
              " parameter groups, but the schedule was made for ", lrs.size());
  for (std::size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(lrs[i]);
  last_lr_ = group_lrs();
}

template <class T>
void LRScheduler<T>::initial_step() {
  step_count_ = 0;
  step();
}

template <class T>
void LRScheduler<T>::step() {
  ++step_count_;
  ++last_epoch_;
  apply(get_lr());
}

template <class T>
void LRScheduler<T>::step_to(int epoch) {
  ++step_count_;
  last_epoch_ = epoch;
  std::optional<std::vector<double>> closed = closed_form_lr();
  apply(closed ? *closed : get_lr());
}

template <class T>
LRSchedulerState LRScheduler<T>::state() const {
  return {last_epoch_, step_count_, base_lrs_, last_lr_, {}};
}

template <class T>
void LRScheduler<T>::load_state(const LRSchedulerState& state) {
  const std::size_t groups = optimizer_.param_groups().size();
  XGRAD_CHECK(state.base_lrs.size() == groups && state.last_lr.size() == groups, name_, ": the state is for ",
              state.base_lrs.size(), " parameter groups, the optimizer has ", groups);
  XGRAD_CHECK(state.schedulers.empty(), name_, ": the state holds ", state.schedulers.size(),
              " nested schedules; expected none");
  XGRAD_CHECK(state.last_epoch >= -1 && state.step_count >= 0, name_, ": invalid state (last_epoch ",
              state.last_epoch, ", step_count ", state.step_count, ")");
  last_epoch_ = state.last_epoch;
  step_count_ = state.step_count;
  base_lrs_ = state.base_lrs;
  last_lr_ = state.last_lr;
}

// ---- StepLR -----------------------------------------------------------------------------------

template <class T>
StepLR<T>::StepLR(Optimizer<T>& optimizer, int step_size, double gamma, int last_epoch)
    : LRScheduler<T>(optimizer, last_epoch, "StepLR"), step_size_(step_size), gamma_(gamma) {
  XGRAD_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  this->initial_step();
}

template <class T>
std::vector<double> StepLR<T>::get_lr() {
  std::vector<double> lrs = this->group_lrs();
  if (this->last_epoch_ == 0 || this->last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

template <class T>
std::optional<std::vector<double>> StepLR<T>::closed_form_lr() const {
  std::vector<double> lrs;
  const int e = this->last_epoch_;
  const int k = e >= 0 ? e / step_size_ : -((-e + step_size_ - 1) / step_size_);  // Python's //
  for (double base_lr : this->base_lrs_) lrs.push_back(base_lr * std::pow(gamma_, static_cast<double>(k)));
  return lrs;
}

// ---- CosineAnnealingLR -----------------------------------------------------------------------

template <class T>
CosineAnnealingLR<T>::CosineAnnealingLR(Optimizer<T>& optimizer, int T_max, double eta_min, int last_epoch)
    : LRScheduler<T>(optimizer, last_epoch, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  XGRAD_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got ", T_max);
  this->initial_step();
}

template <class T>
std::vector<double> CosineAnnealingLR<T>::get_lr() {
  const int e = this->last_epoch_;
  const double T_max = T_max_;
  std::vector<double> lrs = this->group_lrs();
  if (e == 0) return lrs;
  if (this->step_count_ == 1 && e > 0) {
    // constructed with last_epoch > -1: the closed form (note torch's `epoch * pi / T_max` here)
    for (std::size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = eta_min_ + (this->base_lrs_[i] - eta_min_) * (1 + std::cos(e * kPi / T_max)) / 2;
    return lrs;
  }
  if ((e - 1 - T_max_) % (2 * T_max_) == 0) {
    // the bottom of the cosine, where the recursive form would divide by 1 + cos(pi) = 0
    for (std::size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (this->base_lrs_[i] - eta_min_) * (1 - std::cos(kPi / T_max)) / 2;
    return lrs;
  }
  for (double& lr : lrs)
    lr = (1 + std::cos(kPi * e / T_max)) / (1 + std::cos(kPi * (e - 1) / T_max)) * (lr - eta_min_) + eta_min_;
  return lrs;
}

template <class T>
std::optional<std::vector<double>> CosineAnnealingLR<T>::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base_lr : this->base_lrs_)
    lrs.push_back(eta_min_ + (base_lr - eta_min_) * (1 + std::cos(kPi * this->last_epoch_ / T_max_)) / 2);
  return lrs;
}

// ---- LinearLR ---------------------------------------------------------------------------------

template <class T>
LinearLR<T>::LinearLR(Optimizer<T>& optimizer, double start_factor, double end_factor, int total_iters,
                      int last_epoch)
    : LRScheduler<T>(optimizer, last_epoch, "LinearLR"),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  // (PyTorch 1.13 accepts start_factor 0, then divides by zero at epoch 1.)
  XGRAD_CHECK(start_factor > 0.0 && start_factor <= 1.0,
              "LinearLR: starting multiplicative factor expected to be greater than 0 and less or equal to 1, got ",
              start_factor);
  XGRAD_CHECK(end_factor >= 0.0 && end_factor <= 1.0,
              "LinearLR: ending multiplicative factor expected to be between 0 and 1, got ", end_factor);
  XGRAD_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  this->initial_step();
}

template <class T>
std::vector<double> LinearLR<T>::get_lr() {
  const int e = this->last_epoch_;
  std::vector<double> lrs = this->group_lrs();
  if (e == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (e > total_iters_) return lrs;
  const double d = end_factor_ - start_factor_;
  for (double& lr : lrs) lr = lr * (1. + d / (total_iters_ * start_factor_ + (e - 1) * d));
  return lrs;
}

template <class T>
std::optional<std::vector<double>> LinearLR<T>::closed_form_lr() const {
  std::vector<double> lrs;
  const double progress = (end_factor_ - start_factor_) * std::min(total_iters_, this->last_epoch_) / total_iters_;
  for (double base_lr : this->base_lrs_) lrs.push_back(base_lr * (start_factor_ + progress));
  return lrs;
}

// ---- LambdaLR ---------------------------------------------------------------------------------

template <class T>
LambdaLR<T>::LambdaLR(Optimizer<T>& optimizer, Lambda lr_lambda, int last_epoch)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lr_lambda), last_epoch) {}

template <class T>
LambdaLR<T>::LambdaLR(Optimizer<T>& optimizer, std::vector<Lambda> lr_lambdas, int last_epoch)
    : LRScheduler<T>(optimizer, last_epoch, "LambdaLR"), lr_lambdas_(std::move(lr_lambdas)) {
  XGRAD_CHECK(lr_lambdas_.size() == optimizer.param_groups().size(), "LambdaLR: expected ",
              optimizer.param_groups().size(), " lr_lambdas, but got ", lr_lambdas_.size());
  for (std::size_t i = 0; i < lr_lambdas_.size(); ++i)
    XGRAD_CHECK(static_cast<bool>(lr_lambdas_[i]), "LambdaLR: lr_lambda ", i, " is empty");
  this->initial_step();
}

template <class T>
std::vector<double> LambdaLR<T>::get_lr() {
  std::vector<double> lrs;
  for (std::size_t i = 0; i < lr_lambdas_.size(); ++i)
    lrs.push_back(this->base_lrs_[i] * lr_lambdas_[i](this->last_epoch_));
  return lrs;
}

// ---- SequentialLR -----------------------------------------------------------------------------

template <class T>
SequentialLR<T>::SequentialLR(Optimizer<T>& optimizer, std::vector<std::shared_ptr<LRScheduler<T>>> schedulers,
                              std::vector<int> milestones, int last_epoch)
    : LRScheduler<T>(optimizer, -1, "SequentialLR"),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  XGRAD_CHECK(!schedulers_.empty(), "SequentialLR: expected at least one scheduler");
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    XGRAD_CHECK(schedulers_[i] != nullptr, "SequentialLR: scheduler ", i, " is null");
    XGRAD_CHECK(&schedulers_[i]->optimizer() == &optimizer, "SequentialLR: Sequential Schedulers expects all "
                "schedulers to belong to the same optimizer, but got scheduler at index ", i,
                " to be different than the optimizer passed in");
  }
  XGRAD_CHECK(milestones_.size() + 1 == schedulers_.size(), "SequentialLR: Sequential Schedulers expects number of "
              "schedulers provided to be one more than the number of milestone points, but got number of "
              "schedulers ", schedulers_.size(), " and the number of milestones to be equal to ", milestones_.size());
  XGRAD_CHECK(std::is_sorted(milestones_.begin(), milestones_.end()), "SequentialLR: milestones must be sorted, got ",
              milestones_);

  this->last_epoch_ = last_epoch + 1;
  // Undo the schedules' own first steps: lrs back to the initial ones, epochs back by one; then
  // only the first schedule steps.
  for (auto& group : optimizer.param_groups()) group.options().set_lr(*group.initial_lr);
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_.front()->initial_step();
  this->last_lr_ = schedulers_.front()->get_last_lr();
}

template <class T>
void SequentialLR<T>::step() {
  this->last_epoch_ += 1;
  const auto idx = static_cast<std::size_t>(
      std::upper_bound(milestones_.begin(), milestones_.end(), this->last_epoch_) - milestones_.begin());
  LRScheduler<T>& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == this->last_epoch_) s.step_to(0);
  else s.step();
  this->last_lr_ = s.get_last_lr();
}

template <class T>
LRSchedulerState SequentialLR<T>::state() const {
  LRSchedulerState state = LRScheduler<T>::state();
  for (const auto& s : schedulers_) state.schedulers.push_back(s->state());
  return state;
}

template <class T>
void SequentialLR<T>::load_state(const LRSchedulerState& state) {
  XGRAD_CHECK(state.schedulers.size() == schedulers_.size(), "SequentialLR: the state holds ",
              state.schedulers.size(), " schedules, this SequentialLR has ", schedulers_.size());
  LRSchedulerState own = state;
  own.schedulers.clear();
  LRScheduler<T>::load_state(own);
  for (std::size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state(state.schedulers[i]);
}

template class LRScheduler<float>;
template class LRScheduler<double>;
template class StepLR<float>;
template class StepLR<double>;
template class CosineAnnealingLR<float>;
template class CosineAnnealingLR<double>;
template class LinearLR<float>;
template class LinearLR<double>;
template class LambdaLR<float>;
template class LambdaLR<double>;
template class SequentialLR<float>;
template class SequentialLR<double>;

}  // namespace xgrad::optim
