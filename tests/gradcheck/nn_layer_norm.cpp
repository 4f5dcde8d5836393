// The finite-difference checks of xgrad/nn/layer_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/layer_norm.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_layer_norm) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.LayerNorm", "LayerNorm(D) on (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::LayerNorm<double>>().forward(in[0]);
       },
       [](const Sizes& s) {
         auto m = std::make_shared<nn::LayerNorm<double>>(s.D);
         Maker make(s.seed);
         m->weight.mutable_value() = make({s.D}).value();  // not the ones and zeros of the init
         m->bias.mutable_value() = make({s.D}).value();
         SampleInput sample{{make({s.B, s.L, s.D})}};
         sample.module = m;
         return sample;
       }},
  };
}
