// The finite-difference checks of xgrad/nn/embedding.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/embedding.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_embedding) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.Embedding", "Embedding(C, D) on indices (B, L), then tanh",
       [](const Inputs&, const SampleInput& sample) {
         return xgrad::tanh(sample.module_as<nn::Embedding<double>>().forward(sample.index));
       },
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         SampleInput sample;
         sample.module = std::make_shared<nn::Embedding<double>>(s.C, s.D);
         // The input is indices: only the weight is checked.
         sample.index = Maker(s.seed).indices({s.B, s.L}, s.C);
         sample.note = "indices (B, L)";
         return sample;
       }},
  };
}
