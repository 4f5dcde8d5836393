// The finite-difference checks of xgrad/nn/multihead_attention.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/multihead_attention.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_multihead_attention) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.MultiheadAttention", "MultiheadAttention(D, H, dropout 0.1), batch_first, key padding, weights",
              [](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::MultiheadAttention<double>>(
                    nn::MultiheadAttentionOptions(s.D, s.H).dropout(0.1).batch_first(true));
                Maker make(s.seed);
                for (auto& [name, p] : m->named_parameters()) p.mutable_value() = make(p.shape()).value();
                const T64 x = make({s.B, s.L, s.D});
                xgrad::BoolArray padding = xgrad::full_array<bool>({s.B, s.L}, false, "gradcheck");
                padding(0, s.L - 1) = true;  // the last key of the first sequence
                return module_check(*m, x,
                                    reseeded(s.seed,
                                             [=] {
                                               auto [out, weights] = m->forward(x, x, x, padding);
                                               return xgrad::sum(out * out) + xgrad::sum(weights * weights);
                                             }),
                                    o);
              }});
}
