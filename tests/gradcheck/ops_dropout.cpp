// The finite-difference checks of xgrad/ops/dropout.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_dropout) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Generator;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"dropout", "dropout(x (B, L, D), p 0.3), generator re-seeded", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      Generator gen(s.seed + 7);
                      return xgrad::dropout(in[0], 0.3, true, &gen);
                    },
                    {make({s.B, s.L, s.D})}, o);
              }});
}
