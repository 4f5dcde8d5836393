// The finite-difference checks of xgrad/ops/rotary_embedding.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its op (see registry.hpp): over x only, since cos and sin are
// constants (random ones whose halves differ, so the check does not rely on cat(f, f) tables),
// passed as inputs that do not require grad.
XGRAD_GRADCHECKS(ops_rotary_embedding) {
  using namespace xgrad::gradcheck_support;
  const auto rotate = [](const Inputs& in, const SampleInput&) { return xgrad::rotary_embedding(in[0], in[1], in[2]); };
  return {
      {"rotary_embedding", "rotary_embedding(x (B, H, L, 2D), cos, sin (L, 2D) constants)", rotate,
       [](const Sizes& s) {
         Maker make(s.seed);
         const T64 x = make({s.B, s.H, s.L, 2 * s.D});
         const T64 cos = make({s.L, 2 * s.D}).detach(), sin = make({s.L, 2 * s.D}).detach();
         return SampleInput{{x, cos, sin}};
       }},
      {"rotary_embedding_batch_tables", "rotary_embedding(x (B, H, L, 2D), cos, sin (B, 1, L, 2D) constants)", rotate,
       [](const Sizes& s) {
         Maker make(s.seed);
         const T64 x = make({s.B, s.H, s.L, 2 * s.D});
         const T64 cos = make({s.B, 1, s.L, 2 * s.D}).detach(), sin = make({s.B, 1, s.L, 2 * s.D}).detach();
         return SampleInput{{x, cos, sin}};
       }},
  };
}
