// The finite-difference checks of xgrad/ops/rotary_embedding.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/rotary_embedding.hpp>

// Finite-difference checks of its op (see registry.hpp): over x only, since cos and sin are
// constants (random ones whose halves differ, so the check does not rely on cat(f, f) tables).
XGRAD_GRADCHECKS(ops_rotary_embedding) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"rotary_embedding", "rotary_embedding(x (B, H, L, 2D), cos, sin (L, 2D) constants)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 x = make({s.B, s.H, s.L, 2 * s.D});
                const T64 cos = make({s.L, 2 * s.D}).detach(), sin = make({s.L, 2 * s.D}).detach();
                return op_check([=](const Inputs& in) { return xgrad::rotary_embedding(in[0], cos, sin); }, {x}, o);
              }});
  checks.add({"rotary_embedding_batch_tables", "rotary_embedding(x (B, H, L, 2D), cos, sin (B, 1, L, 2D) constants)",
              [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 x = make({s.B, s.H, s.L, 2 * s.D});
                const T64 cos = make({s.B, 1, s.L, 2 * s.D}).detach(), sin = make({s.B, 1, s.L, 2 * s.D}).detach();
                return op_check([=](const Inputs& in) { return xgrad::rotary_embedding(in[0], cos, sin); }, {x}, o);
              }});
}
