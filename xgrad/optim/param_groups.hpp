// nanoGPT's parameter groups (GPT.configure_optimizers): the matrices and embeddings (2 or more
// dimensions) decay, the biases and LayerNorm weights (1 dimension) do not.
//
// compile: snippet given: std::vector<Tensor<float>> params;
//   const auto options = optim::AdamWOptions(6e-4).betas({0.9, 0.95}).weight_decay(0.1);
//   optim::AdamW<float> optimizer(optim::weight_decay_groups(params, options), options);
#pragma once

#include <utility>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/optim/optimizer.hpp>

namespace xgrad::optim {

// Two groups, in this order (the optimizer's state follows it): the parameters of 2 or more
// dimensions with `options` (its weight_decay), the others with options.weight_decay(0); a group
// may be empty. Options: any optimizer's options with a weight_decay option (AdamWOptions...).
template <class T, class Options>
std::vector<ParamGroup<T>> weight_decay_groups(const std::vector<Tensor<T>>& params, const Options& options) {
  std::vector<Tensor<T>> decay, no_decay;
  for (const Tensor<T>& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<ParamGroup<T>> groups;
  groups.emplace_back(std::move(decay), options);
  groups.emplace_back(std::move(no_decay), Options(options).weight_decay(0));
  return groups;
}

}  // namespace xgrad::optim
