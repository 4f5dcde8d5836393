// The finite-difference checks of xgrad/nn/sequential.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/activation.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/sequential.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_sequential) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.Sequential", "Sequential(Linear(D, F), GELU, Linear(F, D))",
       [](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::Sequential<double>>().forward(in[0]);
       },
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         auto m = std::make_shared<nn::Sequential<double>>();
         m->push_back(std::make_shared<nn::Linear<double>>(s.D, s.F));
         m->push_back(std::make_shared<nn::GELU<double>>());
         m->push_back(std::make_shared<nn::Linear<double>>(s.F, s.D));
         SampleInput sample{{Maker(s.seed)({s.B, s.L, s.D})}};
         sample.module = m;
         return sample;
       }},
  };
}
