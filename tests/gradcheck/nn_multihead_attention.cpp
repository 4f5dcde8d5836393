// The finite-difference checks of xgrad/nn/multihead_attention.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>

#include <xgrad/nn/multihead_attention.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_multihead_attention) {
  using namespace xgrad::gradcheck_support;
  namespace nn = xgrad::nn;
  return {
      {"nn.MultiheadAttention", "MultiheadAttention(D, H, dropout 0.1), batch_first, key padding, weights",
       reseeded([](const Inputs& in, const SampleInput& sample) {
         auto [out, weights] =
             sample.module_as<nn::MultiheadAttention<double>>().forward(in[0], in[0], in[0], sample.mask);
         return xgrad::sum(out * out) + xgrad::sum(weights * weights);
       }),
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         auto m = std::make_shared<nn::MultiheadAttention<double>>(
             nn::MultiheadAttentionOptions(s.D, s.H).dropout(0.1).batch_first(true));
         Maker make(s.seed);
         for (auto& [name, p] : m->named_parameters()) p.mutable_value() = make(p.shape()).value();
         SampleInput sample{{make({s.B, s.L, s.D})}};
         sample.module = m;
         // key padding: the last key of the first sequence
         sample.mask = xgrad::full_array<bool>({s.B, s.L}, false, "gradcheck");
         sample.mask(0, s.L - 1) = true;
         return sample;
       }},
  };
}
