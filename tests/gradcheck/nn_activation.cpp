// The finite-difference checks of xgrad/nn/activation.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/activation.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_activation) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.GELU", "GELU() on (B, L, D)", [](const Sizes& s, const O& o) {
                auto m = std::make_shared<nn::GELU<double>>();
                const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
  checks.add({"nn.ReLU", "ReLU() on (B, L, D)", [](const Sizes& s, const O& o) {
                auto m = std::make_shared<nn::ReLU<double>>();
                const T64 x = Maker(s.seed)({s.B, s.L, s.D}, Values::away_from_zero);
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
}
