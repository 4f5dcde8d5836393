// The finite-difference checks of xgrad/nn/transformer.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/nn/transformer.hpp>

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_transformer) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  const auto encoder_layer = [](const Sizes& s, bool norm_first) {
    return std::make_shared<nn::TransformerEncoderLayer<double>>(nn::TransformerEncoderLayerOptions(s.D, s.H)
                                                                     .dim_feedforward(s.F)
                                                                     .dropout(0.2)
                                                                     .activation(norm_first ? "gelu" : "relu")
                                                                     .batch_first(true)
                                                                     .norm_first(norm_first));
  };
  for (const bool norm_first : {false, true}) {
    checks.add({norm_first ? "nn.TransformerEncoderLayer_pre_norm" : "nn.TransformerEncoderLayer",
                norm_first ? "pre-norm, gelu, dim_feedforward F, dropout 0.2, batch_first"
                           : "post-norm, relu, dim_feedforward F, dropout 0.2, batch_first",
                [=](const Sizes& s, const O& o) {
                  xgrad::manual_seed(s.seed);
                  auto m = encoder_layer(s, norm_first);
                  const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                  return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
                }});
  }
  checks.add({"nn.TransformerEncoder", "2 pre-norm gelu layers + final LayerNorm, causal, dropout 0.2",
              [=](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::TransformerEncoder<double>>(encoder_layer(s, true), 2,
                                                                          std::make_shared<nn::LayerNorm<double>>(s.D));
                const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                return module_check(*m, x,
                                    reseeded(s.seed,
                                             [=] {
                                               return m->forward(x, xgrad::AttnMask<double>(),
                                                                 xgrad::AttnMask<double>(),
                                                                 /*is_causal=*/true);
                                             }),
                                    o);
              }});

  // Checks over two inputs, tgt (B, L, D) and memory (or src) (B, L+1, D), and every parameter.
  const auto decoder_check = [](const nn::Module<double>& m, const T64& tgt, const std::string& name, const T64& memory,
                                const std::function<T64()>& evaluate, const O& o) {
    xgrad::NamedTensors tensors{{"tgt", tgt}, {name, memory}};
    std::size_t values = 0;
    for (const auto& p : m.named_parameters()) {
      tensors.push_back(p);
      values += p.second.numel();
    }
    return xgrad::GradcheckOutcome{shapes_of({tgt, memory}) + " + " + std::to_string(tensors.size() - 2) + " params (" +
                                       std::to_string(values) + " values)",
                                   xgrad::SecondOrderChecks::active()
                                       ? xgrad::gradgradcheck_parameters(evaluate, tensors, o)
                                       : xgrad::gradcheck_parameters(evaluate, tensors, o)};
  };
  // The last memory key of the first sequence padded.
  const auto memory_padding = [](const Sizes& s) {
    xgrad::BoolArray padding = xgrad::full_array<bool>({s.B, s.L + 1}, false, "gradcheck");
    padding(0, s.L) = true;
    return padding;
  };
  for (const bool norm_first : {false, true}) {
    checks.add(
        {norm_first ? "nn.TransformerDecoderLayer_pre_norm" : "nn.TransformerDecoderLayer",
         std::string(norm_first ? "pre-norm, gelu" : "post-norm, relu") +
             ", dim_feedforward F, dropout 0.2, batch_first, causal tgt, memory (B, L+1, D) with key padding",
         [=](const Sizes& s, const O& o) {
           xgrad::manual_seed(s.seed);
           auto m = std::make_shared<nn::TransformerDecoderLayer<double>>(nn::TransformerDecoderLayerOptions(s.D, s.H)
                                                                              .dim_feedforward(s.F)
                                                                              .dropout(0.2)
                                                                              .activation(norm_first ? "gelu" : "relu")
                                                                              .batch_first(true)
                                                                              .norm_first(norm_first));
           Maker make(s.seed);
           const T64 tgt = make({s.B, s.L, s.D}), memory = make({s.B, s.L + 1, s.D});
           const xgrad::BoolArray padding = memory_padding(s);
           return decoder_check(
               *m, tgt, "memory", memory,
               reseeded(s.seed, [=] { return m->forward(tgt, memory, {}, {}, {}, padding, /*tgt_is_causal=*/true); }),
               o);
         }});
  }
  checks.add({"nn.Transformer",
              "d_model D, nhead H, 1 + 1 post-norm relu layers, dim_feedforward F, dropout 0.2, "
              "batch_first, tgt (B, L, D) causal, src (B, L+1, D) with key padding",
              [=](const Sizes& s, const O& o) {
                xgrad::manual_seed(s.seed);
                auto m = std::make_shared<nn::Transformer<double>>(nn::TransformerOptions<double>(s.D, s.H)
                                                                       .num_encoder_layers(1)
                                                                       .num_decoder_layers(1)
                                                                       .dim_feedforward(s.F)
                                                                       .dropout(0.2)
                                                                       .batch_first(true));
                Maker make(s.seed);
                const T64 tgt = make({s.B, s.L, s.D}), src = make({s.B, s.L + 1, s.D});
                const xgrad::BoolArray padding = memory_padding(s);
                return decoder_check(*m, tgt, "src", src,
                                     reseeded(s.seed,
                                              [=] {
                                                return m->forward(src, tgt, {}, {}, {}, padding, {}, padding, false,
                                                                  /*tgt_is_causal=*/true);
                                              }),
                                     o);
              }});
}
