// The finite-difference checks of xgrad/nn/transformer.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <memory>
#include <string>

#include <xgrad/nn/transformer.hpp>

namespace {

using namespace xgrad::gradcheck_support;
namespace nn = xgrad::nn;

std::shared_ptr<nn::TransformerEncoderLayer<double>> encoder_layer(const Sizes& s, bool norm_first) {
  return std::make_shared<nn::TransformerEncoderLayer<double>>(nn::TransformerEncoderLayerOptions(s.D, s.H)
                                                                   .dim_feedforward(s.F)
                                                                   .dropout(0.2)
                                                                   .activation(norm_first ? "gelu" : "relu")
                                                                   .batch_first(true)
                                                                   .norm_first(norm_first));
}

xgrad::GradcheckEntry encoder_layer_check(bool norm_first) {
  return {norm_first ? "nn.TransformerEncoderLayer_pre_norm" : "nn.TransformerEncoderLayer",
          norm_first ? "pre-norm, gelu, dim_feedforward F, dropout 0.2, batch_first"
                     : "post-norm, relu, dim_feedforward F, dropout 0.2, batch_first",
          reseeded([](const Inputs& in, const SampleInput& sample) {
            return sample.module_as<nn::TransformerEncoderLayer<double>>().forward(in[0]);
          }),
          [norm_first](const Sizes& s) {
            xgrad::manual_seed(s.seed);
            SampleInput sample;
            sample.module = encoder_layer(s, norm_first);
            sample.inputs = {Maker(s.seed)({s.B, s.L, s.D})};
            return sample;
          }};
}

// Two inputs, tgt (B, L, D) and memory (or src) (B, L+1, D), the last memory key of the first
// sequence padded.
SampleInput decoder_sample(const Sizes& s, std::shared_ptr<nn::Module<double>> module, const std::string& memory) {
  Maker make(s.seed);
  SampleInput sample{{make({s.B, s.L, s.D}), make({s.B, s.L + 1, s.D})}};
  sample.module = std::move(module);
  sample.input_names = {"tgt", memory};
  sample.mask = xgrad::full_array<bool>({s.B, s.L + 1}, false, "gradcheck");  // memory key padding
  sample.mask(0, s.L) = true;
  return sample;
}

xgrad::GradcheckEntry decoder_layer_check(bool norm_first) {
  return {norm_first ? "nn.TransformerDecoderLayer_pre_norm" : "nn.TransformerDecoderLayer",
          std::string(norm_first ? "pre-norm, gelu" : "post-norm, relu") +
              ", dim_feedforward F, dropout 0.2, batch_first, causal tgt, memory (B, L+1, D) with key padding",
          reseeded([](const Inputs& in, const SampleInput& sample) {
            return sample.module_as<nn::TransformerDecoderLayer<double>>().forward(in[0], in[1], {}, {}, {},
                                                                                   sample.mask,
                                                                                   /*tgt_is_causal=*/true);
          }),
          [norm_first](const Sizes& s) {
            xgrad::manual_seed(s.seed);
            auto m = std::make_shared<nn::TransformerDecoderLayer<double>>(nn::TransformerDecoderLayerOptions(s.D, s.H)
                                                                               .dim_feedforward(s.F)
                                                                               .dropout(0.2)
                                                                               .activation(norm_first ? "gelu" : "relu")
                                                                               .batch_first(true)
                                                                               .norm_first(norm_first));
            return decoder_sample(s, m, "memory");
          }};
}

}  // namespace

// Finite-difference checks of its modules (see registry.hpp).
XGRAD_GRADCHECKS(nn_transformer) {
  using namespace xgrad::gradcheck_support;
  return {
      encoder_layer_check(false),
      encoder_layer_check(true),
      {"nn.TransformerEncoder", "2 pre-norm gelu layers + final LayerNorm, causal, dropout 0.2",
       reseeded([](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::TransformerEncoder<double>>().forward(in[0], xgrad::AttnMask<double>(),
                                                                           xgrad::AttnMask<double>(),
                                                                           /*is_causal=*/true);
       }),
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         SampleInput sample;
         sample.module = std::make_shared<nn::TransformerEncoder<double>>(encoder_layer(s, true), 2,
                                                                          std::make_shared<nn::LayerNorm<double>>(s.D));
         sample.inputs = {Maker(s.seed)({s.B, s.L, s.D})};
         return sample;
       }},
      decoder_layer_check(false),
      decoder_layer_check(true),
      {"nn.Transformer",
       "d_model D, nhead H, 1 + 1 post-norm relu layers, dim_feedforward F, dropout 0.2, "
       "batch_first, tgt (B, L, D) causal, src (B, L+1, D) with key padding",
       // inputs: tgt, src
       reseeded([](const Inputs& in, const SampleInput& sample) {
         return sample.module_as<nn::Transformer<double>>().forward(in[1], in[0], {}, {}, {}, sample.mask, {},
                                                                    sample.mask, false, /*tgt_is_causal=*/true);
       }),
       [](const Sizes& s) {
         xgrad::manual_seed(s.seed);
         auto m = std::make_shared<nn::Transformer<double>>(nn::TransformerOptions<double>(s.D, s.H)
                                                                .num_encoder_layers(1)
                                                                .num_decoder_layers(1)
                                                                .dim_feedforward(s.F)
                                                                .dropout(0.2)
                                                                .batch_first(true));
         return decoder_sample(s, m, "src");
       }},
  };
}
