// The finite-difference checks of xgrad/nn/activation.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/activation.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_activation) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.GELU", "GELU() on (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) { return sample.module_as<nn::GELU<double>>().forward(in[0]); },
       [](const Sizes& s) {
         SampleInput sample{{Maker(s.seed)({s.B, s.L, s.D})}};
         sample.module = std::make_shared<nn::GELU<double>>();
         return sample;
       }},
      {"nn.ReLU", "ReLU() on (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) { return sample.module_as<nn::ReLU<double>>().forward(in[0]); },
       [](const Sizes& s) {
         SampleInput sample{{Maker(s.seed)({s.B, s.L, s.D}, Values::away_from_zero)}};
         sample.module = std::make_shared<nn::ReLU<double>>();
         return sample;
       }},
  };
}
