// The finite-difference checks of xgrad/nn/linear.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/linear.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_linear) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Linear", "Linear(D, F) on (B, L, D)", [](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::Linear<double>>(s.D, s.F);
                const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
}
