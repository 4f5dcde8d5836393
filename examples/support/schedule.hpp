// The examples' learning-rate schedule: a linear warmup from lr * start_factor to lr over
// `warmup` steps, then a cosine down to 0 at `max_steps` (SequentialLR of LinearLR and
// CosineAnnealingLR). With the Trainer: warmup from trainer.planned_steps() (an extended run keeps
// the warmup of the run it extends), max_steps = trainer.max_steps().
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include <xgrad/optim/lr_scheduler.hpp>

namespace schedule {

// The warmup actually used: at most planned_steps - 1 (the cosine needs a step).
inline int warmup_steps(int warmup, int planned_steps) { return std::max(0, std::min(warmup, planned_steps - 1)); }

inline std::unique_ptr<xgrad::optim::SequentialLR<float>> warmup_cosine(xgrad::optim::Optimizer<float>& optimizer,
                                                                        int warmup, int max_steps,
                                                                        double start_factor = 0.01) {
  namespace optim = xgrad::optim;
  std::vector<std::shared_ptr<optim::LRScheduler<float>>> phases;
  std::vector<int> milestones;
  if (warmup > 0) {
    phases.push_back(std::make_shared<optim::LinearLR<float>>(optimizer, start_factor, 1.0, warmup));
    milestones.push_back(warmup);
  }
  phases.push_back(std::make_shared<optim::CosineAnnealingLR<float>>(optimizer, std::max(1, max_steps - warmup)));
  return std::make_unique<optim::SequentialLR<float>>(optimizer, phases, milestones);
}

}  // namespace schedule
