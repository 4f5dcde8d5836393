// The finite-difference checks of xgrad/ops/indexing.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <string>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_indexing) {
  using namespace xgrad::gradcheck_support;
  return {
      {"index_select", "index_select(x, 1, indices with repeats), x (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::index_select(in[0], 1, sample.index); },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample{{make({s.B, s.L, s.D})}, "index (" + std::to_string(2 * s.L) + ")"};
         sample.index = make.indices({2 * s.L}, s.L);
         return sample;
       }},
      // (With a padding_idx its row gets no gradient by definition, which no finite difference shows.)
      {"embedding", "embedding(indices (B, L), weight (C, D))",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::embedding<double>(sample.index, in[0]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample{{make({s.C, s.D})}, "indices (" + std::to_string(s.B) + ", " + std::to_string(s.L) + ")"};
         sample.index = make.indices({s.B, s.L}, s.C);
         return sample;
       }},
      {"masked_fill", "masked_fill(x, mask (L, D) broadcast, -1), x (B, L, D)",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::masked_fill(in[0], sample.mask, -1.0); },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample{{make({s.B, s.L, s.D})}, "mask (" + std::to_string(s.L) + ", " + std::to_string(s.D) + ")"};
         sample.mask = make.mask({s.L, s.D}, 0.4);
         return sample;
       }},
      {"where", "where(condition (B, L, D), a (B, L, D), b (D))",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::where(sample.mask, in[0], in[1]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample{{make({s.B, s.L, s.D}), make({s.D})}, "condition (B, L, D)"};
         sample.mask = make.mask({s.B, s.L, s.D}, 0.5);
         return sample;
       }},
  };
}
