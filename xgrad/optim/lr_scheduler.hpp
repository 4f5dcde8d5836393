// Learning-rate schedules over an optimizer (torch.optim.lr_scheduler, PyTorch 1.13): StepLR,
// CosineAnnealingLR, LinearLR (warmup), LambdaLR and SequentialLR (e.g. warmup then cosine).
//
// compile: snippet given: std::vector<Tensor<float>> params;
//   optim::AdamW<> opt(params, optim::AdamWOptions().lr(1e-3));
//   auto warmup = std::make_shared<optim::LinearLR<>>(opt, 0.1, 1.0, 5);
//   auto cosine = std::make_shared<optim::CosineAnnealingLR<>>(opt, 95);
//   optim::SequentialLR<> schedule(opt, {warmup, cosine}, {5});
//   for (int epoch = 0; epoch < 100; ++epoch) {
//     // ... the epoch's batches, each ending in opt.step() ...
//     schedule.step();
//   }
//
// As in PyTorch, constructing a schedule performs its first step: it sets every group's lr to
// the epoch-0 value. Each schedule keeps a reference to its optimizer, which must outlive it.
// Most schedules are chainable: each step computes the new lr from the group's current lr.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

// What a resumed schedule needs (torch's scheduler state_dict without the functions).
struct LRSchedulerState {
  int last_epoch = -1;
  int step_count = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lr;
  std::vector<LRSchedulerState> schedulers;  // SequentialLR: its schedules' states, in order
};

template <class T>
class SequentialLR;

template <class T = float>
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch and sets every group's lr.
  virtual void step();

  // The lr of every group set by the last step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int last_epoch() const { return last_epoch_; }
  // Every group's initial_lr, from which the schedule is computed.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer<T>& optimizer() const { return optimizer_; }

  virtual LRSchedulerState state() const;
  // Restores a state(); does not touch the optimizer's lrs (they are part of its own state).
  virtual void load_state(const LRSchedulerState& state);

 protected:
  // last_epoch == -1 starts afresh (recording each group's lr as its initial_lr); otherwise
  // every group must have an initial_lr already (resuming).
  LRScheduler(Optimizer<T>& optimizer, int last_epoch, const char* name);

  // torch's _initial_step: resets the step count and steps once. Each schedule's constructor
  // calls it last (a base constructor cannot reach the derived get_lr).
  void initial_step();
  // torch's step(epoch): jumps to `epoch`, with the closed form where the schedule has one
  // (SequentialLR restarts a schedule this way at its milestone).
  void step_to(int epoch);
  void apply(const std::vector<double>& lrs);

  // The chainable form: the new lrs from last_epoch_ and the groups' current lrs.
  virtual std::vector<double> get_lr() = 0;
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  std::vector<double> group_lrs() const;

  Optimizer<T>& optimizer_;
  const char* name_;
  std::vector<double> base_lrs_;
  int last_epoch_;
  int step_count_ = 0;
  std::vector<double> last_lr_;

  friend class SequentialLR<T>;
};

// lr = lr * gamma every step_size epochs.
template <class T = float>
class StepLR final : public LRScheduler<T> {
 public:
  StepLR(Optimizer<T>& optimizer, int step_size, double gamma = 0.1, int last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int step_size_;
  double gamma_;
};

// Cosine from base_lr down to eta_min over T_max epochs, and back up after (PyTorch's
// recursive form: lr_t = (1 + cos(pi t/T)) / (1 + cos(pi (t-1)/T)) (lr_{t-1} - eta_min) + eta_min).
template <class T = float>
class CosineAnnealingLR final : public LRScheduler<T> {
 public:
  CosineAnnealingLR(Optimizer<T>& optimizer, int T_max, double eta_min = 0.0, int last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int T_max_;
  double eta_min_;
};

// The lr factor goes linearly from start_factor (epoch 0) to end_factor (epoch total_iters).
template <class T = float>
class LinearLR final : public LRScheduler<T> {
 public:
  LinearLR(Optimizer<T>& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int total_iters = 5,
           int last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_;
  double end_factor_;
  int total_iters_;
};

// lr = base_lr * lr_lambda(epoch); one function for every group, or one per group.
template <class T = float>
class LambdaLR final : public LRScheduler<T> {
 public:
  using Lambda = std::function<double(int)>;
  LambdaLR(Optimizer<T>& optimizer, Lambda lr_lambda, int last_epoch = -1);
  LambdaLR(Optimizer<T>& optimizer, std::vector<Lambda> lr_lambdas, int last_epoch = -1);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<Lambda> lr_lambdas_;
};

// Runs schedulers[i] from milestones[i-1] on (restarted at epoch 0 there); all must drive this
// optimizer, and there is one milestone fewer than schedulers.
template <class T = float>
class SequentialLR final : public LRScheduler<T> {
 public:
  SequentialLR(Optimizer<T>& optimizer, std::vector<std::shared_ptr<LRScheduler<T>>> schedulers,
               std::vector<int> milestones, int last_epoch = -1);

  void step() override;
  LRSchedulerState state() const override;
  void load_state(const LRSchedulerState& state) override;

 protected:
  // The lrs the active schedule set (SequentialLR's step delegates to its schedules).
  std::vector<double> get_lr() override { return this->group_lrs(); }

 private:
  std::vector<std::shared_ptr<LRScheduler<T>>> schedulers_;
  std::vector<int> milestones_;
};

extern template class LRScheduler<float>;
extern template class LRScheduler<double>;
extern template class StepLR<float>;
extern template class StepLR<double>;
extern template class CosineAnnealingLR<float>;
extern template class CosineAnnealingLR<double>;
extern template class LinearLR<float>;
extern template class LinearLR<double>;
extern template class LambdaLR<float>;
extern template class LambdaLR<double>;
extern template class SequentialLR<float>;
extern template class SequentialLR<double>;

}  // namespace xgrad::optim
