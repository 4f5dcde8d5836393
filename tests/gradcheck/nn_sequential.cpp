// The finite-difference checks of xgrad/nn/sequential.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/sequential.hpp>
#include <xgrad/nn/activation.hpp>
#include <xgrad/nn/linear.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_sequential) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Sequential", "Sequential(Linear(D, F), GELU, Linear(F, D))", [](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::Sequential<double>>();
                m->push_back(std::make_shared<nn::Linear<double>>(s.D, s.F));
                m->push_back(std::make_shared<nn::GELU<double>>());
                m->push_back(std::make_shared<nn::Linear<double>>(s.F, s.D));
                const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                return module_check(
                    *m, x, [=] { return m->forward(x); }, o);
              }});
}
