// The model of a Hugging Face GPT-2 folder for the example programs, with every failure a
// xgrad::train::Refused line naming --hf; its loss on token windows, and nanoGPT's AdamW and
// learning-rate schedule for fine-tuning it.
#pragma once

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/data/token_file.hpp>
#include <xgrad/models/hf_gpt2.hpp>
#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace hf_gpt2_model {

// dir/config.json, checked; a folder without it is refused naming --hf.
inline xgrad::models::GPTConfig config(const std::string& dir) {
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "config.json"))
    throw xgrad::train::Refused("--hf " + dir + ": no config.json there: expected a Hugging Face GPT-2 folder");
  try {
    return xgrad::models::load_hf_gpt2_config(dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

// dir's weights into `model` (built from config(dir)).
inline void load_weights(xgrad::models::GPT<float>& model, const std::string& dir) {
  try {
    xgrad::models::load_hf_gpt2_weights(model, dir);
  } catch (const std::exception& e) {
    throw xgrad::train::Refused("--hf " + dir + ": " + e.what());
  }
}

// The language model's loss: cross-entropy of the logits of x against y, over every position.
inline xgrad::Tensor<float> lm_loss(xgrad::models::GPT<float>& model, const xgrad::data::TokenBatch& batch) {
  const xgrad::Tensor<float> logits = model.forward(batch.x);
  return xgrad::cross_entropy(xgrad::reshape(logits, {-1, logits.size(-1)}),
                              xgrad::IndexArray(xt::reshape_view(batch.y, {batch.y.size()})));
}

// nanoGPT's configure_optimizers: AdamW with weight decay on the matrices (and embeddings) only.
inline xgrad::optim::AdamW<float> adamw(xgrad::models::GPT<float>& model, double lr, double weight_decay,
                                        xgrad::optim::Betas betas) {
  namespace optim = xgrad::optim;
  std::vector<xgrad::Tensor<float>> decay, no_decay;
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto options = optim::AdamWOptions(lr).betas(betas).weight_decay(weight_decay);
  return optim::AdamW<float>({optim::ParamGroup<float>(decay),
                              optim::ParamGroup<float>(no_decay, optim::AdamWOptions(options).weight_decay(0))},
                             options);
}

// nanoGPT's get_lr as a factor of the peak: linear warmup over `warmup` steps, then cosine to
// `floor` at step `iters`.
inline double lr_factor(int step, int warmup, int iters, double floor) {
  if (step < warmup) return double(step + 1) / double(warmup + 1);
  const double progress = std::min(1.0, double(step - warmup) / double(std::max(1, iters - warmup)));
  return floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hf_gpt2_model
