// The finite-difference checks of xgrad/nn/dropout.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/dropout.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_dropout) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.Dropout", "Dropout(0.3) in training, default generator re-seeded",
       reseeded([](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::Dropout<double>>().forward(in[0]);
       }),
       [](const Sizes& s) {
         SampleInput sample{{Maker(s.seed)({s.B, s.L, s.D})}};
         sample.module = std::make_shared<nn::Dropout<double>>(0.3);
         return sample;
       }},
  };
}
