// The finite-difference checks of xgrad/ops/dropout.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_dropout) {
  using namespace xgrad::gradcheck_support;
  return {
      {"dropout", "dropout(x (B, L, D), p 0.3), generator re-seeded",
       [](const Inputs& in, const SampleInput& sample) {
         xgrad::Generator gen(sample.sizes.seed + 7);
         return xgrad::dropout(in[0], 0.3, true, &gen);
       },
       [](const Sizes& s) {
         return SampleInput{{Maker(s.seed)({s.B, s.L, s.D})}};
       }},
  };
}
