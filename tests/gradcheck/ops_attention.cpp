// The finite-difference checks of xgrad/ops/attention/attention.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/attention/attention_kernels.hpp>  // set_attention_tiles

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_attention) {
  using namespace xgrad::gradcheck_support;
  using xgrad::Generator;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add(
      {"scaled_dot_product_attention", "q (B, H, L, D), k and v (B, H, L + 1, D), bool mask",
       [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         const xgrad::BoolArray mask = make.mask({s.L, s.L + 1}, 0.3);
         return op_check(
             [=](const Inputs& in) { return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask); },
             {make({s.B, s.H, s.L, s.D}), make({s.B, s.H, s.L + 1, s.D}), make({s.B, s.H, s.L + 1, s.D})}, o, "mask");
       }});
  checks.add({"sdpa_causal_dropout", "causal attention with dropout 0.2 (re-seeded), q k v (B, L, D)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      Generator gen(s.seed + 7);
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true,
                                                                         std::nullopt, false, &gen);
                    },
                    {make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
              }});
  checks.add({"sdpa_gqa", "grouped-query: q (B, 2 H, L, D), k and v (B, H, L + 1, D), enable_gqa, bool mask",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const xgrad::BoolArray mask = make.mask({s.L, s.L + 1}, 0.3);
                return op_check(
                    [=](const Inputs& in) {
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask, 0.0, false,
                                                                         std::nullopt, /*enable_gqa=*/true);
                    },
                    {make({s.B, 2 * s.H, s.L, s.D}), make({s.B, s.H, s.L + 1, s.D}), make({s.B, s.H, s.L + 1, s.D})}, o,
                    "mask");
              }});
  checks.add({"sdpa_gqa_causal_dropout",
              "multi-query: causal, dropout 0.2 (re-seeded), q (B, 3, L, D), k and v (B, 1, L, D), enable_gqa",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      Generator gen(s.seed + 7);
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true,
                                                                         std::nullopt, /*enable_gqa=*/true, &gen);
                    },
                    {make({s.B, 3, s.L, s.D}), make({s.B, 1, s.L, s.D}), make({s.B, 1, s.L, s.D})}, o);
              }});
}
