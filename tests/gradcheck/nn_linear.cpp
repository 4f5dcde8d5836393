// The finite-difference checks of xgrad/nn/linear.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/linear.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_linear) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.Linear", "Linear(D, F) on (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::Linear<double>>().forward(in[0]);
       },
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         SampleInput sample;
         sample.module = std::make_shared<nn::Linear<double>>(s.D, s.F);
         sample.inputs = {Maker(s.seed)({s.B, s.L, s.D})};
         return sample;
       }},
  };
}
