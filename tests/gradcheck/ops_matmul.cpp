// The finite-difference checks of xgrad/ops/matmul.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_matmul) {
  using namespace xgrad::gradcheck_support;
  const auto matmul = [](const Inputs& in, const SampleInput&) { return xgrad::matmul(in[0], in[1]); };
  return {
      {"matmul", "matmul(a (B, L, D), b (D, F)): batch broadcast", matmul,
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.D, s.F})}};
       }},
      {"matmul_batched", "matmul(a (B, 1, L, D), b (H, D, F)): batch dims broadcast", matmul,
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, 1, s.L, s.D}), make({s.H, s.D, s.F})}};
       }},
      {"matmul_vector", "matmul(v (D), m (B, D, F)) and matmul(m, w (F))",
       [](const Inputs& in, const SampleInput&) { return xgrad::matmul(xgrad::matmul(in[0], in[1]), in[2]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.D}), make({s.B, s.D, s.F}), make({s.F})}};
       }},
      {"matmul_dot", "matmul(v (D), w (D)): a 0-d result", matmul,
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.D}), make({s.D})}};
       }},
      {"matmul_shared_a", "matmul(a (L, D), b (B, D, F)): a broadcast over the batch", matmul,
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.L, s.D}), make({s.B, s.D, s.F})}};
       }},
      {"linear", "linear(x (B, L, D), weight (F, D), bias (F))",
       [](const Inputs& in, const SampleInput&) { return xgrad::linear(in[0], in[1], in[2]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.F, s.D}), make({s.F})}};
       }},
      {"linear_no_bias", "linear(x (D), weight (F, D)): a 1-D input, no bias",
       [](const Inputs& in, const SampleInput&) { return xgrad::linear(in[0], in[1]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.D}), make({s.F, s.D})}};
       }},
  };
}
