// The finite-difference checks of xgrad/ops/loss.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_loss) {
  using namespace xgrad::gradcheck_support;
  using xgrad::IndexArray;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"mse_loss", "mse_loss(input, target), both (B, L, D), mean", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::mse_loss(in[0], in[1]); },
                                {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
              }});
  checks.add({"mse_loss_none", "mse_loss(input, target, \"none\")", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::mse_loss(in[0], in[1], "none"); },
                                {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
              }});
  checks.add({"mse_loss_sum", "mse_loss(input, target, \"sum\")", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::mse_loss(in[0], in[1], "sum"); },
                                {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
              }});
  checks.add({"cross_entropy", "cross_entropy(logits (B L, C), target (B L)), ignore_index, label smoothing 0.1",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                IndexArray target = make.indices({s.B * s.L}, s.C);
                target(0) = -100;  // ignored
                return op_check(
                    [=](const Inputs& in) { return xgrad::cross_entropy(in[0], target, -100, "mean", 0.1); },
                    {make({s.B * s.L, s.C})}, o, "target (" + std::to_string(s.B * s.L) + ")");
              }});
  checks.add(
      {"cross_entropy_nd", "cross_entropy(logits (B, C, L), target (B, L)), sum", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         const IndexArray target = make.indices({s.B, s.L}, s.C);
         return op_check([=](const Inputs& in) { return xgrad::cross_entropy(in[0], target, -100, "sum"); },
                         {make({s.B, s.C, s.L})}, o, "target (B, L)");
       }});
  checks.add({"cross_entropy_none",
              "cross_entropy(logits (B, C, L), target (B, L)), none, ignore_index 1, label smoothing 0.2",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const IndexArray target = make.indices({s.B, s.L}, s.C);
                return op_check([=](const Inputs& in) { return xgrad::cross_entropy(in[0], target, 1, "none", 0.2); },
                                {make({s.B, s.C, s.L})}, o, "target (B, L)");
              }});
  checks.add({"cross_entropy_1d", "cross_entropy(logits (C), target ()), mean", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const IndexArray target = make.indices({}, s.C);
                return op_check([=](const Inputs& in) { return xgrad::cross_entropy(in[0], target); }, {make({s.C})}, o,
                                "target ()");
              }});
}
