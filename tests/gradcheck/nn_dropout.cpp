// The finite-difference checks of xgrad/nn/dropout.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/dropout.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_dropout) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Dropout", "Dropout(0.3) in training, default generator re-seeded", [](const Sizes& s, const O& o) {
                auto m = std::make_shared<nn::Dropout<double>>(0.3);
                const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
              }});
}
