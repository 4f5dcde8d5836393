// The finite-difference checks of xgrad/ops/rms_norm.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/rms_norm.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_rms_norm) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Shape;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"rms_norm", "rms_norm(x (B, L, D), (D), weight)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([=](const Inputs& in) { return xgrad::rms_norm(in[0], Shape{s.D}, in[1], 1e-5); },
                                {make({s.B, s.L, s.D}), make({s.D})}, o);
              }});
  checks.add(
      {"rms_norm_no_weight", "rms_norm(x (B, L, D), (D)) without weight, default eps", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([=](const Inputs& in) { return xgrad::rms_norm(in[0], Shape{s.D}); }, {make({s.B, s.L, s.D})},
                         o);
       }});
  checks.add({"rms_norm_2d_weight", "rms_norm(x (B, L, D), (L, D), weight (L, D))", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      return xgrad::rms_norm(in[0], Shape{s.L, s.D}, in[1], 1e-5);
                    },
                    {make({s.B, s.L, s.D}), make({s.L, s.D})}, o);
              }});
  checks.add({"add_rms_norm_with_sum", "s, y = add_rms_norm_with_sum(x, r (B, L, D), (D), weight), then s * y",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      const auto [sum, y] = xgrad::add_rms_norm_with_sum(in[0], in[1], Shape{s.D}, in[2], 1e-5);
                      return sum * y;
                    },
                    {make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.D})}, o);
              }});
}
