// LoRA (https://arxiv.org/abs/2106.09685) as PEFT's lora.Linear (peft/tuners/lora/layer.py): a
// frozen nn::Linear gains a trainable low-rank update,
//
//   y = W x + b + lora_B(lora_A(dropout(x))) * scaling,  scaling = lora_alpha / r
//                                                         (lora_alpha / sqrt(r) with use_rslora)
//   lora_A.weight (r, in_features): kaiming_uniform(a = sqrt(5)), as nn.Linear's init
//   lora_B.weight (out_features, r): zeros, so a new adapter leaves the model's output unchanged
//
//   auto model = models::load_hf_llama<float>("SmolLM2-135M");
//   nn::inject_lora(*model, nn::LoraConfig().r(16).lora_alpha(32).target_modules({"q_proj", "v_proj"}));
//   optim::AdamW<float> opt(model->parameters(), ...);  // only lora_A / lora_B ever get a gradient
//   ... train ...; nn::merge_lora(*model);               // W += scaling * B A: a plain model again
//
// inject_lora freezes every parameter of the model (requires_grad false: no gradient, so no
// optimizer state and no weight-gradient product in a frozen linear's backward) and attaches a
// LoraLayer to each targeted Linear; lora_A and lora_B are registered under that Linear, so their
// keys are PEFT's saved keys without its "base_model.model." prefix
// (model.layers.0.self_attn.q_proj.lora_A.weight). models/peft.hpp reads and writes PEFT's files.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <xgrad/arg.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

// PEFT's LoraConfig, the fields xgrad implements (names and defaults are PEFT's).
struct LoraConfig {
  XGRAD_ARG(std::int64_t, r) = 8;
  XGRAD_ARG(double, lora_alpha) = 8.0;
  XGRAD_ARG(double, lora_dropout) = 0.0;
  // Module-name suffixes ("q_proj" matches model.layers.0.self_attn.q_proj), or {"all-linear"}:
  // every Linear but the output layer lm_head.
  XGRAD_ARG(std::vector<std::string>, target_modules);
  XGRAD_ARG(bool, use_rslora) = false;

 public:
  double scaling() const;  // lora_alpha / r, or lora_alpha / sqrt(r)
  bool all_linear() const { return target_modules_.size() == 1 && target_modules_[0] == "all-linear"; }
};

template <class T = float>
class LoraLayer : public LinearAdapter<T> {
 public:
  // Attaches to `base` (registers lora_dropout, lora_A and lora_B under it) and freezes nothing:
  // inject_lora does.
  LoraLayer(Linear<T>& base, const LoraConfig& config);

  // linear(x, W, b) + lora_B(lora_A(dropout(x))) * scaling; linear(x, W, b) alone once merged.
  // Without dropout (lora_dropout 0, or eval mode) as one op (detail::lora_linear: the same values).
  Tensor<T> forward_linear(const Tensor<T>& input, const Tensor<T>& weight, const Tensor<T>& bias) override;

  // scaling * B A (out_features, in_features) (PEFT's get_delta_weight).
  Array<T> delta_weight() const;
  // W += delta_weight() (forward then skips the update); unmerge subtracts it back. Each refuses a
  // second call in a row.
  void merge();
  void unmerge();
  bool merged() const { return merged_; }
  double scaling() const { return scaling_; }

  std::shared_ptr<Linear<T>> lora_A, lora_B;  // (r, in), (out, r), no bias
  std::shared_ptr<Dropout<T>> lora_dropout;   // null when lora_dropout is 0 (PEFT's nn.Identity)

 private:
  Tensor<T> base_weight_;  // aliases the base Linear's weight
  double scaling_;
  bool merged_ = false;
};

// The Linears that config.target_modules names, by dotted name in model order, checked as
// inject_lora checks them (std::invalid_argument); nothing is changed.
template <class T>
std::vector<std::pair<std::string, std::shared_ptr<Linear<T>>>> lora_targets(Module<T>& model,
                                                                             const LoraConfig& config);

// Freezes every parameter of `model`, then attaches a LoraLayer to every Linear that
// config.target_modules names (checked first: r >= 1, lora_alpha finite, 0 <= lora_dropout < 1;
// every target must match at least one Linear, and none may have an adapter already: each
// refused naming the target). Returns the dotted names of the adapted Linears, in model order.
template <class T>
std::vector<std::string> inject_lora(Module<T>& model, const LoraConfig& config);

// The LoRA layers of `model` by their Linear's dotted name.
template <class T>
std::vector<std::pair<std::string, std::shared_ptr<LoraLayer<T>>>> lora_layers(Module<T>& model);

// merge() / unmerge() on every LoRA layer of the model.
template <class T>
void merge_lora(Module<T>& model);
template <class T>
void unmerge_lora(Module<T>& model);

// The state of the parameters that require grad (a LoRA model's lora_A and lora_B), and the
// state without the LoRA layers' (the base model's keys: what a merged model saves).
template <class T>
StateDict<T> trainable_state_dict(const Module<T>& model);
template <class T>
StateDict<T> base_state_dict(Module<T>& model);

// A module whose parameters are `model`'s that require grad, under the same names (PyTorch's
// `{k: v for k, v in model.named_parameters() if v.requires_grad}` as a module): what a Trainer
// checkpoints and an optimizer steps in a LoRA run, so a checkpoint holds the adapter and its
// optimizer state, not the frozen model. Its parameters alias the model's (a load writes into
// them); train() and eval() set the model's mode too. `model` must outlive it.
template <class T>
std::shared_ptr<Module<T>> trainable_view(Module<T>& model);

extern template class LoraLayer<float>;
extern template class LoraLayer<double>;

}  // namespace xgrad::nn
