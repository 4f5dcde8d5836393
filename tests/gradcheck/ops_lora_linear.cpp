// The finite-difference checks of xgrad/ops/lora_linear.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/lora_linear.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_lora_linear) {
  using namespace xgrad::gradcheck_support;
  return {
      {"lora_linear",
       "detail::lora_linear(x (B, L, D), weight (F, D), bias (F), lora_A (2, D), lora_B (F, 2), scaling 1.5)",
       [](const Inputs& in, const SampleInput&) {
         return xgrad::detail::lora_linear(in[0], in[1], in[2], in[3], in[4], 1.5);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.F, s.D}), make({s.F}), make({2, s.D}), make({s.F, 2})}};
       }},
      {"lora_linear_no_bias", "detail::lora_linear(x (L, D), weight (F, D), lora_A (3, D), lora_B (F, 3), scaling 2)",
       [](const Inputs& in, const SampleInput&) {
         return xgrad::detail::lora_linear(in[0], in[1], T64(), in[2], in[3], 2.0);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.L, s.D}), make({s.F, s.D}), make({3, s.D}), make({s.F, 3})}};
       }},
  };
}
