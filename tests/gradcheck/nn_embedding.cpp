// The finite-difference checks of xgrad/nn/embedding.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/embedding.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_embedding) {
  using namespace xgrad::gradcheck_support;
  using xgrad::IndexArray;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Embedding", "Embedding(C, D) on indices (B, L), then tanh", [](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::Embedding<double>>(s.C, s.D);
                const IndexArray idx = Maker(s.seed).indices({s.B, s.L}, s.C);
                // The input is indices: only the weight is checked.
                return module_check(
                    *m, T64(), [=] { return xgrad::tanh(m->forward(idx)); }, o, "indices (B, L)");
              }});
}
