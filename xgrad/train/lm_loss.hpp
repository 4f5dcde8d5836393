// The language model's loss, as nanoGPT's GPT.forward(idx, targets) computes it:
//   F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=...)
//
// compile: snippet given: models::GPT<float> model(models::GPTConfig{}); IndexArray x, y;
//   const Tensor<float> loss = train::lm_loss(model.forward(x), y);  // x, y: (B, T) token ids
#pragma once

#include <cstdint>

#include <xgrad/core/tensor.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::train {

// logits: (B, T, V) (or any (..., V)), targets: (B, T) class ids (the logits' leading shape) ->
// the mean cross entropy over every position whose target is not ignore_index (a scalar).
template <class T>
Tensor<T> lm_loss(const Tensor<T>& logits, const IndexArray& targets, std::int64_t ignore_index = -100) {
  return cross_entropy(reshape(logits, {-1, logits.size(-1)}), IndexArray(xt::reshape_view(targets, {targets.size()})),
                       ignore_index);
}

}  // namespace xgrad::train
