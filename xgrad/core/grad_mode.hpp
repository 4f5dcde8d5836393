// Grad mode (torch.no_grad) and anomaly mode (torch.autograd.detect_anomaly), per thread.
#pragma once

namespace xgrad {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// torch.no_grad(): no graph is built while one is alive.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// torch.enable_grad() / torch.set_grad_enabled(mode) as a scope (at::AutoGradMode).
class GradGuard {
 public:
  explicit GradGuard(bool enabled) : previous_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradGuard() { set_grad_enabled(previous_); }
  GradGuard(const GradGuard&) = delete;
  GradGuard& operator=(const GradGuard&) = delete;

 private:
  bool previous_;
};

bool is_anomaly_enabled();
void set_detect_anomaly(bool enabled);

// torch.autograd.detect_anomaly(): a NaN or Inf produced in backward throws an error naming
// the op whose backward produced it.
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : previous_(is_anomaly_enabled()) { set_detect_anomaly(true); }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace xgrad
