// The finite-difference checks of xgrad/ops/indexing.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_indexing) {
  using namespace xgrad::gradcheck_support;
  using xgrad::IndexArray;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add({"index_select", "index_select(x, 1, indices with repeats), x (B, L, D)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 x = make({s.B, s.L, s.D});
                const IndexArray index = make.indices({2 * s.L}, s.L);
                return op_check([=](const Inputs& in) { return xgrad::index_select(in[0], 1, index); }, {x}, o,
                                "index (" + std::to_string(2 * s.L) + ")");
              }});
  // (With a padding_idx its row gets no gradient by definition, which no finite difference shows.)
  checks.add({"embedding", "embedding(indices (B, L), weight (C, D))", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 w = make({s.C, s.D});
                const IndexArray idx = make.indices({s.B, s.L}, s.C);
                return op_check([=](const Inputs& in) { return xgrad::embedding<double>(idx, in[0]); }, {w}, o,
                                "indices (" + std::to_string(s.B) + ", " + std::to_string(s.L) + ")");
              }});
  checks.add({"masked_fill", "masked_fill(x, mask (L, D) broadcast, -1), x (B, L, D)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 x = make({s.B, s.L, s.D});
                const xgrad::BoolArray mask = make.mask({s.L, s.D}, 0.4);
                return op_check([=](const Inputs& in) { return xgrad::masked_fill(in[0], mask, -1.0); }, {x}, o,
                                "mask (" + std::to_string(s.L) + ", " + std::to_string(s.D) + ")");
              }});
  checks.add({"where", "where(condition (B, L, D), a (B, L, D), b (D))", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const T64 a = make({s.B, s.L, s.D}), b = make({s.D});
                const xgrad::BoolArray cond = make.mask({s.B, s.L, s.D}, 0.5);
                return op_check([=](const Inputs& in) { return xgrad::where(cond, in[0], in[1]); }, {a, b}, o,
                                "condition (B, L, D)");
              }});
}
