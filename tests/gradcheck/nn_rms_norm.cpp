// The finite-difference checks of xgrad/nn/rms_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/rms_norm.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_rms_norm) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.RMSNorm", "RMSNorm(D, eps=1e-6) on (B, L, D)", [](const Sizes& s, const O& o) {
                auto m = std::make_shared<nn::RMSNorm<double>>(nn::RMSNormOptions(s.D).eps(1e-6));
                Maker make(s.seed);
                m->weight.mutable_value() = make({s.D}).value();  // not the ones of the init
                const T64 x = make({s.B, s.L, s.D});
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
}
