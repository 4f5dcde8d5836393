// The finite-difference checks of xgrad/nn/layer_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/layer_norm.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_layer_norm) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.LayerNorm", "LayerNorm(D) on (B, L, D)", [](const Sizes& s, const O& o) {
                auto m = std::make_shared<nn::LayerNorm<double>>(s.D);
                Maker make(s.seed);
                m->weight.mutable_value() = make({s.D}).value();  // not the ones and zeros of the init
                m->bias.mutable_value() = make({s.D}).value();
                const T64 x = make({s.B, s.L, s.D});
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
}
