// train_masked_chars' task and model: words encoded as letters, BERT's masking (15% of the letters,
// at least one, 80% [MASK], 10% a random letter, 10% kept), the held-out split by a seeded hash,
// the encoder that predicts the masked letters, its held-out accuracy and its ONNX export.
//   word (B, L) -> tok_emb + pos_emb -> TransformerEncoder (pre-norm, GELU, key padding mask from
//   pad_collate) -> Linear(D, 28) -> cross_entropy on the chosen letters (ignore_index elsewhere)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/xgrad.hpp>
#ifdef XGRAD_WITH_ONNX
#include "onnx_sample.hpp"
#endif

namespace masked_chars {

using xgrad::IndexArray;
namespace nn = xgrad::nn;
namespace data = xgrad::data;

constexpr std::int64_t kPad = 0, kMask = 1, kVocab = 28, kIgnore = -100;  // 'a'..'z' are 2..27

// Lower-case ASCII letters only, 1 to max_len of them -> tokens (L); otherwise (0).
inline IndexArray encode(const std::string& word, int max_len, bool blanks = false) {
  IndexArray t = IndexArray::from_shape({word.size() <= std::size_t(max_len) ? word.size() : 0});
  for (std::size_t i = 0; i < t.size(); ++i) {
    const bool letter = word[i] >= 'a' && word[i] <= 'z', blank = blanks && word[i] == '_';
    if (!letter && !blank) return IndexArray::from_shape({0});
    t(i) = letter ? 2 + (word[i] - 'a') : kMask;
  }
  return t;
}

inline bool is_held_out(const std::string& word, std::uint64_t seed) {  // 10% of words, by FNV-1a + splitmix
  std::uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char ch : word) h = (h ^ ch) * 1099511628211ULL;
  return (((h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ULL) >> 29) % 10 == 0;
}

struct Masked {
  IndexArray inputs, targets;  // (B, L): the letters with some replaced; the chosen letters, kIgnore elsewhere
  xgrad::BoolArray padding;    // (B, L): true past each word's end
};

// eval: every chosen letter becomes [MASK] (the measured task); otherwise BERT's 80/10/10.
inline Masked mask_batch(const data::PaddedBatch<std::int64_t>& b, double p, xgrad::Generator& g, bool eval) {
  Masked m{b.padded, xt::full_like(b.padded, kIgnore), b.key_padding_mask};
  for (std::size_t i = 0; i < b.lengths.size(); ++i) {
    const std::size_t n = b.lengths[i], forced = g.next_u64() % n;  // at least one letter per word
    for (std::size_t t = 0; t < n; ++t) {
      if (!(g.uniform() < p) && t != forced) continue;
      m.targets(i, t) = b.padded(i, t);
      const double r = g.uniform();
      if (eval || r < 0.8)
        m.inputs(i, t) = kMask;
      else if (r < 0.9)
        m.inputs(i, t) = 2 + std::int64_t(g.next_u64() % 26);
    }
  }
  return m;
}

struct ModelOptions {
  int d_model = 96, layers = 3, heads = 4, dim_feedforward = 256;
  static constexpr int max_len = 16;  // longer words are skipped
};

struct MaskedCharModel : nn::Module<float> {
  explicit MaskedCharModel(const ModelOptions& c) : Module("MaskedCharModel") {
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding<float>>(kVocab, c.d_model));
    pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding<float>>(c.max_len, c.d_model));
    const auto layer =
        std::make_shared<nn::TransformerEncoderLayer<float>>(nn::TransformerEncoderLayerOptions(c.d_model, c.heads)
                                                                 .dim_feedforward(c.dim_feedforward)
                                                                 .dropout(0.0)
                                                                 .activation("gelu")
                                                                 .batch_first(true)
                                                                 .norm_first(true));
    encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder<float>>(
                                             layer, c.layers, std::make_shared<nn::LayerNorm<float>>(c.d_model)));
    head = register_module("head", std::make_shared<nn::Linear<float>>(c.d_model, kVocab));
  }
  // tokens (B, L), padding (B, L) -> logits (B, L, 28)
  xgrad::Tensor<float> forward(const IndexArray& tokens, const xgrad::BoolArray& padding) {
    const IndexArray positions = xt::arange<std::int64_t>(std::int64_t(tokens.shape(1)));
    const xgrad::Tensor<float> x = tok_emb->forward(tokens) + pos_emb->forward(positions);  // (B, L, D) + (L, D)
    return head->forward(encoder->forward(x, {}, padding));
  }
  std::shared_ptr<nn::Embedding<float>> tok_emb, pos_emb;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::shared_ptr<nn::Linear<float>> head;
};

// Fraction of the chosen letters predicted right (argmax).
inline double accuracy(MaskedCharModel& model, const std::vector<Masked>& held_out) {
  xgrad::NoGradGuard no_grad;  // (no dropout in the model: train and eval mode agree)
  std::size_t right = 0, total = 0;
  for (const Masked& m : held_out) {
    const xgrad::Array<float> p = model.forward(m.inputs, m.padding).value();  // logits (B, L, 28)
    for (std::size_t i = 0; i < m.targets.size(); ++i) {
      const float* row = p.data() + i * kVocab;
      right += std::max_element(row, row + kVocab) - row == m.targets.data()[i];  // never kIgnore
      total += m.targets.data()[i] != kIgnore;
    }
  }
  return double(right) / double(total);
}

#ifdef XGRAD_WITH_ONNX
// --export-onnx: word (batch, L) and its key padding mask (batch, L) -> logits (batch, L, 28), batch
// and L dynamic (the positions 0..L-1 the forward makes become a Range), and the sample: the 4
// shortest and the 6 longest words of the first held-out batch, each set padded to its longest word
// only (two lengths), with this program's logits.
inline void export_onnx(MaskedCharModel& model, const std::vector<Masked>& held_out, const std::string& path) {
  const Masked& m = held_out.front();
  const std::size_t n = m.inputs.shape(0), width = m.inputs.shape(1);
  std::vector<std::size_t> length(n, 0), by_length(n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < width; ++j)
      if (!m.padding(i, j)) length[i] = j + 1;
  for (std::size_t i = 0; i < n; ++i) by_length[i] = i;
  std::stable_sort(by_length.begin(), by_length.end(),
                   [&](std::size_t a, std::size_t b) { return length[a] < length[b]; });
  const auto words = [&](std::vector<std::size_t> rows, bool trim) {  // padded to the longest of them when trim
    std::size_t cut = trim ? 1 : width;
    for (std::size_t i : rows) cut = std::max(cut, length[i]);
    IndexArray tokens = IndexArray::from_shape({rows.size(), cut});
    xgrad::BoolArray padding = xgrad::BoolArray::from_shape({rows.size(), cut});
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t j = 0; j < cut; ++j) tokens(r, j) = m.inputs(rows[r], j), padding(r, j) = m.padding(rows[r], j);
    return std::make_pair(tokens, padding);
  };
  const auto example = words({0, std::min<std::size_t>(1, n - 1), std::min<std::size_t>(2, n - 1)}, false);
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) {
        return std::vector<xgrad::Tensor<float>>{model.forward(in.indices(0), in.mask(1))};
      },
      {example.first, example.second}, path,
      xgrad::onnx::ExportOptions()
          .input_names({"tokens", "key_padding_mask"})
          .output_names({"logits"})
          .dynamic_axes(
              {{"tokens", {{0, "batch"}, {1, "length"}}}, {"key_padding_mask", {{0, "batch"}, {1, "length"}}}}));
  xgrad::NoGradGuard no_grad;
  model.eval();
  std::vector<onnx_sample::Run> runs;
  const std::size_t few = std::min<std::size_t>(4, n), many = std::min<std::size_t>(6, n);
  for (const auto& [tokens, padding] :
       {words(std::vector<std::size_t>(by_length.begin(), by_length.begin() + few), true),
        words(std::vector<std::size_t>(by_length.end() - many, by_length.end()), true)})
    runs.push_back({{{"tokens", tokens}, {"key_padding_mask", padding}}, {{"logits", model.forward(tokens, padding)}}});
  model.train();
  onnx_sample::write(path, runs);
  std::printf("exported the trained model to %s (ONNX, opset 17), a sample to %s.sample.json\n", path.c_str(),
              path.c_str());
}
#endif

}  // namespace masked_chars
