// The finite-difference checks of xgrad/nn/lora.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/init.hpp>
#include <xgrad/nn/lora.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_lora) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.LoraLayer", "Linear(D, F) with LoRA r 2, alpha 3, rslora, on (B, L, D); B drawn (not zeros)",
       [](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::Linear<double>>().forward(in[0]);
       },
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         auto linear = std::make_shared<nn::Linear<double>>(s.D, s.F);
         nn::inject_lora(*linear, nn::LoraConfig().r(2).lora_alpha(3).use_rslora(true).target_modules({"all-linear"}));
         // Zero B would hide A's gradient; the base weight is frozen, so only A, B and x are checked.
         xgrad::nn::init::uniform_(nn::lora_layers(*linear)[0].second->lora_B->weight, -1.0, 1.0);
         SampleInput sample;
         sample.module = linear;
         sample.inputs = {Maker(s.seed)({s.B, s.L, s.D})};
         return sample;
       }},
  };
}
