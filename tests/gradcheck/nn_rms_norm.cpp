// The finite-difference checks of xgrad/nn/rms_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/rms_norm.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_rms_norm) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.RMSNorm", "RMSNorm(D, eps=1e-6) on (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::RMSNorm<double>>().forward(in[0]);
       },
       [](const Sizes& s) {
         auto m = std::make_shared<nn::RMSNorm<double>>(nn::RMSNormOptions(s.D).eps(1e-6));
         Maker make(s.seed);
         m->weight.mutable_value() = make({s.D}).value();  // not the ones of the init
         SampleInput sample{{make({s.B, s.L, s.D})}};
         sample.module = m;
         return sample;
       }},
  };
}
