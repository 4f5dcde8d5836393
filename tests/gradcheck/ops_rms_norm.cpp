// The finite-difference checks of xgrad/ops/rms_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_rms_norm) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Shape;
  return {
      {"rms_norm", "rms_norm(x (B, L, D), (D), weight)",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::rms_norm(in[0], Shape{sample.sizes.D}, in[1], 1e-5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.D})}};
       }},
      {"rms_norm_no_weight", "rms_norm(x (B, L, D), (D)) without weight, default eps",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::rms_norm(in[0], Shape{sample.sizes.D}); },
       [](const Sizes& s) {
         return SampleInput{{Maker(s.seed)({s.B, s.L, s.D})}};
       }},
      {"rms_norm_2d_weight", "rms_norm(x (B, L, D), (L, D), weight (L, D))",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::rms_norm(in[0], Shape{sample.sizes.L, sample.sizes.D}, in[1], 1e-5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.L, s.D})}};
       }},
      {"add_rms_norm_with_sum", "s, y = add_rms_norm_with_sum(x, r (B, L, D), (D), weight), then s * y",
       [](const Inputs& in, const SampleInput& sample) {
         const auto [sum, y] = xgrad::add_rms_norm_with_sum(in[0], in[1], Shape{sample.sizes.D}, in[2], 1e-5);
         return sum * y;
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D})}};
       }},
  };
}
