// The finite-difference checks of xgrad/ops/linear_gelu.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/linear_gelu.hpp>
#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_linear_gelu) {
  using namespace xgrad::gradcheck_support;
  return {
      {"linear_gelu", "detail::linear_gelu(x (B, L, D), weight (F, D), bias (F)): exact GELU",
       [](const Inputs& in, const SampleInput&) { return xgrad::detail::linear_gelu(in[0], in[1], in[2]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.F, s.D}), make({s.F})}};
       }},
      {"linear_gelu_tanh_no_bias", "detail::linear_gelu(x (L, D), weight (F, D)): tanh GELU, no bias",
       [](const Inputs& in, const SampleInput&) { return xgrad::detail::linear_gelu(in[0], in[1], T64(), "tanh"); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.L, s.D}), make({s.F, s.D})}};
       }},
  };
}
