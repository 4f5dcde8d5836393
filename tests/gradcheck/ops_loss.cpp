// The finite-difference checks of xgrad/ops/loss.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <string>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_loss) {
  using namespace xgrad::gradcheck_support;
  // input and target, both (B, L, D)
  const auto two_inputs = [](const Sizes& s) {
    Maker make(s.seed);
    return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}};
  };
  // logits (B, C, L) with a target (B, L)
  const auto nd_logits = [](const Sizes& s) {
    Maker make(s.seed);
    SampleInput sample;
    sample.index = make.indices({s.B, s.L}, s.C);
    sample.inputs = {make({s.B, s.C, s.L})};
    sample.note = "target (B, L)";
    return sample;
  };
  return {
      {"mse_loss", "mse_loss(input, target), both (B, L, D), mean",
       [](const Inputs& in, const SampleInput&) { return xgrad::mse_loss(in[0], in[1]); }, two_inputs},
      {"mse_loss_none", "mse_loss(input, target, \"none\")",
       [](const Inputs& in, const SampleInput&) { return xgrad::mse_loss(in[0], in[1], "none"); }, two_inputs},
      {"mse_loss_sum", "mse_loss(input, target, \"sum\")",
       [](const Inputs& in, const SampleInput&) { return xgrad::mse_loss(in[0], in[1], "sum"); }, two_inputs},
      {"cross_entropy", "cross_entropy(logits (B L, C), target (B L)), ignore_index, label smoothing 0.1",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::cross_entropy(in[0], sample.index, -100, "mean", 0.1);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.index = make.indices({s.B * s.L}, s.C);
         sample.index(0) = -100;  // ignored
         sample.inputs = {make({s.B * s.L, s.C})};
         sample.note = "target (" + std::to_string(s.B * s.L) + ")";
         return sample;
       }},
      {"cross_entropy_nd", "cross_entropy(logits (B, C, L), target (B, L)), sum",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::cross_entropy(in[0], sample.index, -100, "sum");
       },
       nd_logits},
      {"cross_entropy_none",
       "cross_entropy(logits (B, C, L), target (B, L)), none, ignore_index 1, label smoothing 0.2",
       [](const Inputs& in, const SampleInput& sample) {
         return xgrad::cross_entropy(in[0], sample.index, 1, "none", 0.2);
       },
       nd_logits},
      {"cross_entropy_1d", "cross_entropy(logits (C), target ()), mean",
       [](const Inputs& in, const SampleInput& sample) { return xgrad::cross_entropy(in[0], sample.index); },
       [](const Sizes& s) {
         Maker make(s.seed);
         SampleInput sample;
         sample.index = make.indices({}, s.C);
         sample.inputs = {make({s.C})};
         sample.note = "target ()";
         return sample;
       }},
  };
}
