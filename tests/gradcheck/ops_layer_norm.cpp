// The finite-difference checks of xgrad/ops/layer_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_layer_norm) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Shape;
  return {
      {"layer_norm", "layer_norm(x (B, L, D), (D), weight, bias)",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::layer_norm(in[0], Shape{sample.sizes.D}, in[1], in[2], 1e-5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.D}), make({s.D})}};
       }},
      {"layer_norm_no_affine", "layer_norm(x (B, L, D), (D)) without weight and bias",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::layer_norm(in[0], Shape{sample.sizes.D}, {}, {}, 1e-5);
       },
       [](const Sizes& s) {
         return SampleInput{{Maker(s.seed)({s.B, s.L, s.D})}};
       }},
      {"layer_norm_2d_weight", "layer_norm(x (B, L, D), (L, D), weight (L, D)), no bias",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::layer_norm(in[0], Shape{sample.sizes.L, sample.sizes.D}, in[1], {}, 1e-5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.L, s.D})}};
       }},
      {"add_layer_norm", "add_layer_norm(x (B, L, D), r (B, L, D), (D), weight, bias)",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::add_layer_norm(in[0], in[1], Shape{sample.sizes.D}, in[2], in[3], 1e-5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D}), make({s.D})}};
       }},
      {"add_layer_norm_with_sum", "s, y = add_layer_norm_with_sum(x, r (B, L, D), (D), weight), then s * y",
       [](const Inputs& in, const SampleInput& sample) {
         const auto [sum, y] = xgrad::add_layer_norm_with_sum(in[0], in[1], Shape{sample.sizes.D}, in[2], {}, 1e-5);
         return sum * y;
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D})}};
       }},
  };
}
