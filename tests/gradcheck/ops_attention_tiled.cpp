// The finite-difference checks of xgrad/ops/attention/attention_tiled.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <optional>

#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/attention/attention_kernels.hpp>  // set_attention_tiles

namespace {

// Sets the tiled path and blocks of 2 query rows and 3 key rows for its lifetime, so that tiny
// shapes cross block edges (the backward keeps the forward's).
struct TiledPath {
  xgrad::AttentionPath before = xgrad::get_attention_path();
  TiledPath() {
    xgrad::set_attention_path(xgrad::AttentionPath::Tiled);
    xgrad::detail::set_attention_tiles(2, 3);
  }
  ~TiledPath() {
    xgrad::set_attention_path(before);
    xgrad::detail::set_attention_tiles(0, 0);
  }
};

}  // namespace

// Finite-difference checks of the tiled path (see registry.hpp), forced.
XGRAD_GRADCHECKS(ops_attention_tiled) {
  using namespace xgrad::gradcheck_support;
  return {
      {"sdpa_tiled_bool_mask", "tiled path: q (B, H, L + 2, D), k and v (B, H, L + 3, D), bool mask",
       [](const Inputs& in, const SampleInput& sample) {
         TiledPath tiled;
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], sample.mask);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.mask = make.mask({s.L + 2, s.L + 3}, 0.3);
         sample.inputs = {make({s.B, s.H, s.L + 2, s.D}), make({s.B, s.H, s.L + 3, s.D}),
                          make({s.B, s.H, s.L + 3, s.D})};
         sample.note = "mask";
         return sample;
       }},
      {"sdpa_tiled_float_mask", "tiled path: q (B, L + 2, D), k and v (B, L + 3, D), float mask (B, L+2, L+3)",
       [](const Inputs& in, const SampleInput& sample) {
         TiledPath tiled;
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], sample.float_mask);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.float_mask = make({s.B, s.L + 2, s.L + 3}).value();
         sample.inputs = {make({s.B, s.L + 2, s.D}), make({s.B, s.L + 3, s.D}), make({s.B, s.L + 3, s.D})};
         sample.note = "mask";
         return sample;
       }},
      {"sdpa_tiled_causal_dropout",
       "tiled path: causal, dropout 0.2 (re-seeded), q (B, L + 3, D), k and v (B, L + 1, D)",
       [](const Inputs& in, const SampleInput& sample) {
         TiledPath tiled;
         xgrad::Generator gen(sample.sizes.seed + 7);
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true, std::nullopt, false,
                                                            &gen);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L + 3, s.D}), make({s.B, s.L + 1, s.D}), make({s.B, s.L + 1, s.D})}};
       }},
      {"sdpa_tiled_gqa",
       "tiled path: grouped-query, q (B, 2 H, L + 2, D), k and v (B, H, L + 3, D), enable_gqa, float mask "
       "(2 H, L + 2, L + 3)",
       [](const Inputs& in, const SampleInput& sample) {
         TiledPath tiled;
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], sample.float_mask, 0.0, false,
                                                            std::nullopt, /*enable_gqa=*/true);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.float_mask = make({2 * s.H, s.L + 2, s.L + 3}).value();
         sample.inputs = {make({s.B, 2 * s.H, s.L + 2, s.D}), make({s.B, s.H, s.L + 3, s.D}),
                          make({s.B, s.H, s.L + 3, s.D})};
         sample.note = "mask";
         return sample;
       }},
      {"sdpa_tiled_gqa_causal_dropout",
       "tiled path: multi-query, causal, dropout 0.2 (re-seeded), q (B, 3, L + 3, D), k and v (B, 1, L + 1, D)",
       [](const Inputs& in, const SampleInput& sample) {
         TiledPath tiled;
         xgrad::Generator gen(sample.sizes.seed + 7);
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true, std::nullopt,
                                                            /*enable_gqa=*/true, &gen);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, 3, s.L + 3, s.D}), make({s.B, 1, s.L + 1, s.D}), make({s.B, 1, s.L + 1, s.D})}};
       }},
  };
}
