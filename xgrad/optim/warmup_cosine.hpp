// A linear warmup then a cosine decay, in two forms: nanoGPT's (train.py's get_lr) as a factor of
// the peak lr for LambdaLR, and torch's own schedules chained (SequentialLR of LinearLR and
// CosineAnnealingLR).
//
// compile: snippet given: std::vector<Tensor<float>> params;
//   optim::AdamW<float> optimizer(params, optim::AdamWOptions(1e-3));
//   optim::LambdaLR<float> schedule(optimizer, optim::warmup_cosine(100, 2000, 0.1));  // lr 1e-3 -> 1e-4
//   // or: from lr / 100 up to lr over 100 steps, then cosine down to 0 at step 2000
//   const auto chained = optim::warmup_cosine_lr(optimizer, 100, 2000);
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include <xgrad/optim/lr_scheduler.hpp>

namespace xgrad::optim {

// The factor of step s (0-based, the step LambdaLR passes) with w = warmup steps, n = max_steps:
//   s < w:  (s + 1) / (w + 1)
//   else:   min_factor + (1 - min_factor) (1 + cos(pi p)) / 2,  p = min(1, (s - w) / max(1, n - w))
inline std::function<double(int)> warmup_cosine(int warmup, int max_steps, double min_factor = 0.0) {
  return [warmup, max_steps, min_factor](int step) {
    if (step < warmup) return double(step + 1) / double(warmup + 1);
    const double progress = std::min(1.0, double(step - warmup) / double(std::max(1, max_steps - warmup)));
    return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(M_PI * progress));
  };
}

// SequentialLR of LinearLR (the factor from start_factor to 1 over `warmup` steps; none when 0)
// and CosineAnnealingLR (down to 0 over max_steps - warmup steps, at least 1): the lr of step s is
// lr (start_factor + (1 - start_factor) s / warmup) during the warmup, then
// lr (1 + cos(pi (s - warmup) / (max_steps - warmup))) / 2 (CosineAnnealingLR's recursive form).
template <class T>
std::unique_ptr<SequentialLR<T>> warmup_cosine_lr(Optimizer<T>& optimizer, int warmup, int max_steps,
                                                  double start_factor = 0.01) {
  std::vector<std::shared_ptr<LRScheduler<T>>> phases;
  std::vector<int> milestones;
  if (warmup > 0) {
    phases.push_back(std::make_shared<LinearLR<T>>(optimizer, start_factor, 1.0, warmup));
    milestones.push_back(warmup);
  }
  phases.push_back(std::make_shared<CosineAnnealingLR<T>>(optimizer, std::max(1, max_steps - warmup)));
  return std::make_unique<SequentialLR<T>>(optimizer, phases, milestones);
}

}  // namespace xgrad::optim
