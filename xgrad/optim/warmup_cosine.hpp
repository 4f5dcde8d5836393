// nanoGPT's learning-rate schedule (train.py's get_lr) as a factor of the peak lr, for LambdaLR:
// a linear warmup, then a cosine down to min_factor at max_steps, min_factor after.
//
// compile: snippet given: std::vector<Tensor<float>> params;
//   optim::AdamW<float> optimizer(params, optim::AdamWOptions(1e-3));
//   optim::LambdaLR<float> schedule(optimizer, optim::warmup_cosine(100, 2000, 0.1));  // lr 1e-3 -> 1e-4
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

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

}  // namespace xgrad::optim
