// Gradient clipping (torch.nn.utils.clip_grad_norm_ / clip_grad_value_, PyTorch 1.13). Both
// change the gradients in place and ignore parameters without a gradient.
#pragma once

#include <vector>

#include <xgrad/core/tensor.hpp>

namespace xgrad::optim {

// The norm of all gradients taken together, as if concatenated into one vector:
//   total = || (||g_1||_p, ..., ||g_k||_p) ||_p     (norm_type p > 0, or infinity: max |g|)
// then every gradient is multiplied by min(1, max_norm / (total + 1e-6)). Returns total (0 when
// no parameter has a gradient). A non-finite total throws when error_if_nonfinite, else it
// propagates into the gradients, as in PyTorch. max_norm must be >= 0 (NaN and negative values
// throw; infinity clips nothing).
template <class T>
T clip_grad_norm_(const std::vector<Tensor<T>>& params, double max_norm, double norm_type = 2.0,
                  bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value]; clip_value must be >= 0.
template <class T>
void clip_grad_value_(const std::vector<Tensor<T>>& params, double clip_value);

}  // namespace xgrad::optim
