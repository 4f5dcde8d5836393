// The finite-difference checks of xgrad/ops/attention/attention.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <optional>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_attention) {
  using namespace xgrad::gradcheck_support;
  return {
      {"scaled_dot_product_attention", "q (B, H, L, D), k and v (B, H, L + 1, D), bool mask",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], sample.mask);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.mask = make.mask({s.L, s.L + 1}, 0.3);
         sample.inputs = {make({s.B, s.H, s.L, s.D}), make({s.B, s.H, s.L + 1, s.D}), make({s.B, s.H, s.L + 1, s.D})};
         sample.note = "mask";
         return sample;
       }},
      {"sdpa_causal_dropout", "causal attention with dropout 0.2 (re-seeded), q k v (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) {
         xgrad::Generator gen(sample.sizes.seed + 7);
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true, std::nullopt, false,
                                                            &gen);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}};
       }},
      {"sdpa_gqa", "grouped-query: q (B, 2 H, L, D), k and v (B, H, L + 1, D), enable_gqa, bool mask",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], sample.mask, 0.0, false, std::nullopt,
                                                            /*enable_gqa=*/true);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.mask = make.mask({s.L, s.L + 1}, 0.3);
         sample.inputs = {make({s.B, 2 * s.H, s.L, s.D}), make({s.B, s.H, s.L + 1, s.D}),
                          make({s.B, s.H, s.L + 1, s.D})};
         sample.note = "mask";
         return sample;
       }},
      {"sdpa_gqa_causal_dropout",
       "multi-query: causal, dropout 0.2 (re-seeded), q (B, 3, L, D), k and v (B, 1, L, D), enable_gqa",
       [](const Inputs& in, const SampleInput& sample) {
         xgrad::Generator gen(sample.sizes.seed + 7);
         return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true, std::nullopt,
                                                            /*enable_gqa=*/true, &gen);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, 3, s.L, s.D}), make({s.B, 1, s.L, s.D}), make({s.B, 1, s.L, s.D})}};
       }},
  };
}
