// The finite-difference checks of xgrad/ops/layer_norm.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_layer_norm) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Shape;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"layer_norm", "layer_norm(x (B, L, D), (D), weight, bias)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) { return xgrad::layer_norm(in[0], Shape{s.D}, in[1], in[2], 1e-5); },
                    {make({s.B, s.L, s.D}), make({s.D}), make({s.D})}, o);
              }});
  checks.add(
      {"layer_norm_no_affine", "layer_norm(x (B, L, D), (D)) without weight and bias", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([=](const Inputs& in) { return xgrad::layer_norm(in[0], Shape{s.D}, {}, {}, 1e-5); },
                         {make({s.B, s.L, s.D})}, o);
       }});
  checks.add({"layer_norm_2d_weight", "layer_norm(x (B, L, D), (L, D), weight (L, D)), no bias",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      return xgrad::layer_norm(in[0], Shape{s.L, s.D}, in[1], {}, 1e-5);
                    },
                    {make({s.B, s.L, s.D}), make({s.L, s.D})}, o);
              }});
  checks.add(
      {"add_layer_norm", "add_layer_norm(x (B, L, D), r (B, L, D), (D), weight, bias)", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check(
             [=](const Inputs& in) { return xgrad::add_layer_norm(in[0], in[1], Shape{s.D}, in[2], in[3], 1e-5); },
             {make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D}), make({s.D})}, o);
       }});
  checks.add({"add_layer_norm_with_sum", "s, y = add_layer_norm_with_sum(x, r (B, L, D), (D), weight), then s * y",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      const auto [sum, y] = xgrad::add_layer_norm_with_sum(in[0], in[1], Shape{s.D}, in[2], {}, 1e-5);
                      return sum * y;
                    },
                    {make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D})}, o);
              }});
}
