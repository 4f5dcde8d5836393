// The finite-difference checks of xgrad/ops/matmul.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_matmul) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"matmul", "matmul(a (B, L, D), b (D, F)): batch broadcast", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); },
                                {make({s.B, s.L, s.D}), make({s.D, s.F})}, o);
              }});
  checks.add(
      {"matmul_batched", "matmul(a (B, 1, L, D), b (H, D, F)): batch dims broadcast", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); },
                         {make({s.B, 1, s.L, s.D}), make({s.H, s.D, s.F})}, o);
       }});
  checks.add({"matmul_vector", "matmul(v (D), m (B, D, F)) and matmul(m, w (F))", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::matmul(xgrad::matmul(in[0], in[1]), in[2]); },
                                {make({s.D}), make({s.B, s.D, s.F}), make({s.F})}, o);
              }});
  checks.add(
      {"matmul_dot", "matmul(v (D), w (D)): a 0-d result", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); }, {make({s.D}), make({s.D})}, o);
       }});
  checks.add(
      {"matmul_shared_a", "matmul(a (L, D), b (B, D, F)): a broadcast over the batch", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); },
                         {make({s.L, s.D}), make({s.B, s.D, s.F})}, o);
       }});
  checks.add({"linear", "linear(x (B, L, D), weight (F, D), bias (F))", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::linear(in[0], in[1], in[2]); },
                                {make({s.B, s.L, s.D}), make({s.F, s.D}), make({s.F})}, o);
              }});
  checks.add({"linear_no_bias", "linear(x (D), weight (F, D)): a 1-D input, no bias", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check([](const Inputs& in) { return xgrad::linear(in[0], in[1]); },
                                {make({s.D}), make({s.F, s.D})}, o);
              }});
}
