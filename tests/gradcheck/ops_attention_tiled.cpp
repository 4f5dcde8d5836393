// The finite-difference checks of xgrad/ops/attention/attention_tiled.cpp (the gradcheck registry: registry.hpp).
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

// Finite-difference checks of the tiled path (see registry.hpp), forced, with
// blocks of 2 query rows and 3 key rows so that tiny shapes cross block edges.
XGRAD_GRADCHECKS(ops_attention_tiled) {
  using namespace xgrad::gradcheck_support;
  using xgrad::AttentionPath;
  using xgrad::Generator;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  // Sets the tiled path and the small blocks for its lifetime (the backward keeps the forward's).
  struct TiledPath {
    AttentionPath before = xgrad::get_attention_path();
    TiledPath() {
      xgrad::set_attention_path(AttentionPath::Tiled);
      xgrad::detail::set_attention_tiles(2, 3);
    }
    ~TiledPath() {
      xgrad::set_attention_path(before);
      xgrad::detail::set_attention_tiles(0, 0);
    }
  };
  checks.add({"sdpa_tiled_bool_mask", "tiled path: q (B, H, L + 2, D), k and v (B, H, L + 3, D), bool mask",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const xgrad::BoolArray mask = make.mask({s.L + 2, s.L + 3}, 0.3);
                return op_check(
                    [=](const Inputs& in) {
                      TiledPath tiled;
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask);
                    },
                    {make({s.B, s.H, s.L + 2, s.D}), make({s.B, s.H, s.L + 3, s.D}), make({s.B, s.H, s.L + 3, s.D})}, o,
                    "mask");
              }});
  checks.add({"sdpa_tiled_float_mask", "tiled path: q (B, L + 2, D), k and v (B, L + 3, D), float mask (B, L+2, L+3)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const xgrad::Array<double> mask = make({s.B, s.L + 2, s.L + 3}).value();
                return op_check(
                    [=](const Inputs& in) {
                      TiledPath tiled;
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask);
                    },
                    {make({s.B, s.L + 2, s.D}), make({s.B, s.L + 3, s.D}), make({s.B, s.L + 3, s.D})}, o, "mask");
              }});
  checks.add({"sdpa_tiled_causal_dropout",
              "tiled path: causal, dropout 0.2 (re-seeded), q (B, L + 3, D), k and v (B, L + 1, D)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      TiledPath tiled;
                      Generator gen(s.seed + 7);
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true,
                                                                         std::nullopt, false, &gen);
                    },
                    {make({s.B, s.L + 3, s.D}), make({s.B, s.L + 1, s.D}), make({s.B, s.L + 1, s.D})}, o);
              }});
  checks.add(
      {"sdpa_tiled_gqa",
       "tiled path: grouped-query, q (B, 2 H, L + 2, D), k and v (B, H, L + 3, D), enable_gqa, float mask "
       "(2 H, L + 2, L + 3)",
       [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         const xgrad::Array<double> mask = make({2 * s.H, s.L + 2, s.L + 3}).value();
         return op_check(
             [=](const Inputs& in) {
               TiledPath tiled;
               return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask, 0.0, false, std::nullopt,
                                                                  /*enable_gqa=*/true);
             },
             {make({s.B, 2 * s.H, s.L + 2, s.D}), make({s.B, s.H, s.L + 3, s.D}), make({s.B, s.H, s.L + 3, s.D})}, o,
             "mask");
       }});
  checks.add({"sdpa_tiled_gqa_causal_dropout",
              "tiled path: multi-query, causal, dropout 0.2 (re-seeded), q (B, 3, L + 3, D), k and v (B, 1, L + 1, D)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [=](const Inputs& in) {
                      TiledPath tiled;
                      Generator gen(s.seed + 7);
                      return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true,
                                                                         std::nullopt, /*enable_gqa=*/true, &gen);
                    },
                    {make({s.B, 3, s.L + 3, s.D}), make({s.B, 1, s.L + 1, s.D}), make({s.B, 1, s.L + 1, s.D})}, o);
              }});
}
