// The finite-difference checks of xgrad/core/checkpoint.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/core/checkpoint.hpp>
#include <xgrad/nn/activation.hpp>
#include <xgrad/nn/dropout.hpp>
#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/sequential.hpp>

// A checkpointed block with dropout: its parameters are reached through the checkpoint (leaves
// found by its discovery forward), and every evaluation, the recompute included, draws the same
// mask (the default generator re-seeded, then replayed by the checkpoint). Second order: the
// checkpoint's create_graph path (recompute under grad mode, autograd::grad with create_graph).
XGRAD_GRADCHECKS(core_checkpoint) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"utils.checkpoint", "checkpoint(Sequential(Linear(D, F), GELU, Dropout(0.3), Linear(F, D))), training",
       reseeded([](const Inputs& in, const SampleInput& sample) {
         auto& block = sample.module_as<nn::Sequential<double>>();
         return xgrad::utils::checkpoint<double>([&block](const T64& x) { return block.forward(x); }, in[0]);
       }),
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         auto m = std::make_shared<nn::Sequential<double>>();
         m->push_back(std::make_shared<nn::Linear<double>>(s.D, s.F));
         m->push_back(std::make_shared<nn::GELU<double>>());
         m->push_back(std::make_shared<nn::Dropout<double>>(0.3));
         m->push_back(std::make_shared<nn::Linear<double>>(s.F, s.D));
         SampleInput sample{{Maker(s.seed)({s.B, s.L, s.D})}};
         sample.module = m;
         return sample;
       }},
  };
}
