// train_toy_encoder's task and model: sequences of digits to sort (or reverse), a transformer
// encoder that predicts one digit per position, its held-out accuracy and its ONNX export.
//
//   tokens (B, L) -> tok_emb + pos_emb (B, L, D) -> TransformerEncoder (pre-norm, GELU, final
//   LayerNorm) -> head Linear(D, V) -> logits (B, L, V)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <xtensor/xview.hpp>

#include <xgrad/train/world.hpp>
#include <xgrad/xgrad.hpp>
#ifdef XGRAD_WITH_ONNX
#include "onnx_sample.hpp"
#endif

namespace sort_digits {

using xgrad::IndexArray;
using xgrad::Tensor;
namespace nn = xgrad::nn;

struct Task {
  bool sort = true;  // else reverse
  int seq_len = 8, vocab = 10;
};

struct Batch {
  IndexArray tokens;   // (B, L) digits
  IndexArray targets;  // (B, L) the digits sorted (or reversed)
};

// A sequence as a string, one byte per digit (the vocabulary is at most 256): the held-out key.
inline std::string key_of(const std::int64_t* digits, int n) { return std::string(digits, digits + n); }

// n random sequences, none of them in `exclude`.
inline Batch make_batch(const Task& t, xgrad::Generator& gen, std::size_t n,
                        const std::unordered_set<std::string>* exclude = nullptr) {
  const auto L = static_cast<std::size_t>(t.seq_len);
  Batch b{IndexArray::from_shape({n, L}), IndexArray::from_shape({n, L})};
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t* x = b.tokens.data() + i * L;
    do {
      for (std::size_t j = 0; j < L; ++j) x[j] = static_cast<std::int64_t>(gen.next_u64() % std::uint64_t(t.vocab));
    } while (exclude != nullptr && exclude->count(key_of(x, t.seq_len)) != 0);
    std::int64_t* y = b.targets.data() + i * L;
    std::copy(x, x + L, y);
    if (t.sort)
      std::sort(y, y + L);
    else
      std::reverse(y, y + L);
  }
  return b;
}

// Rows [r n/N, (r+1) n/N) of a batch: rank r's share of it in a world of N.
inline std::pair<std::size_t, std::size_t> share(std::size_t n, const xgrad::train::World& world) {
  return {n * std::size_t(world.rank()) / std::size_t(world.size()),
          n * std::size_t(world.rank() + 1) / std::size_t(world.size())};
}
inline IndexArray rows(const IndexArray& a, std::size_t begin, std::size_t end) {
  return IndexArray(xt::view(a, xt::range(begin, end), xt::all()));
}

struct ModelOptions {
  int d_model = 64, layers = 2, heads = 4, dim_feedforward = 128;
  double dropout = 0.0;
};

class ToyEncoder : public nn::Module<float> {
 public:
  ToyEncoder(const Task& t, const ModelOptions& m) : Module("ToyEncoder"), seq_len_(t.seq_len) {
    tok_emb = register_module("tok_emb", std::make_shared<nn::Embedding<float>>(t.vocab, m.d_model));
    pos_emb = register_module("pos_emb", std::make_shared<nn::Embedding<float>>(t.seq_len, m.d_model));
    const auto options = nn::TransformerEncoderLayerOptions(m.d_model, m.heads)
                             .dim_feedforward(m.dim_feedforward)
                             .dropout(m.dropout)
                             .activation("gelu")
                             .batch_first(true)
                             .norm_first(true);
    encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder<float>>(
                                             std::make_shared<nn::TransformerEncoderLayer<float>>(options), m.layers,
                                             std::make_shared<nn::LayerNorm<float>>(m.d_model)));
    head = register_module("head", std::make_shared<nn::Linear<float>>(m.d_model, t.vocab));
  }

  // tokens (B, L) -> logits (B, L, vocab)
  Tensor<float> forward(const IndexArray& tokens) {
    IndexArray positions = IndexArray::from_shape({static_cast<std::size_t>(seq_len_)});
    for (int i = 0; i < seq_len_; ++i) positions(i) = i;
    const Tensor<float> x = tok_emb->forward(tokens) + pos_emb->forward(positions);  // (B, L, D) + (L, D)
    return head->forward(encoder->forward(x));
  }

  std::shared_ptr<nn::Embedding<float>> tok_emb, pos_emb;
  std::shared_ptr<nn::TransformerEncoder<float>> encoder;
  std::shared_ptr<nn::Linear<float>> head;

 private:
  int seq_len_;
};

// Predictions (argmax over the vocabulary) for a batch, in eval mode without a graph.
inline IndexArray predict(ToyEncoder& model, const IndexArray& tokens, bool bf16) {
  xgrad::NoGradGuard no_grad;
  xgrad::AutocastGuard autocast(bf16);
  const bool was_training = model.is_training();
  model.eval();
  const xgrad::Array<float> logits = model.forward(tokens).value();
  model.train(was_training);
  const std::size_t V = logits.shape(2);
  IndexArray out = IndexArray::from_shape({tokens.shape(0), tokens.shape(1)});
  for (std::size_t i = 0; i < out.size(); ++i) {
    const float* row = logits.data() + i * V;
    out.data()[i] = std::max_element(row, row + V) - row;
  }
  return out;
}

// The fractions of digits and of whole sequences predicted right. In a distributed run each rank
// predicts its share of the rows and the counts are summed over the ranks.
inline std::pair<double, double> accuracy(ToyEncoder& model, const Batch& data, bool bf16, xgrad::train::World& world) {
  const std::size_t n = data.tokens.shape(0), L = data.tokens.shape(1);
  const auto [begin, end] = share(n, world);
  double counts[2] = {0, 0};  // digits right, sequences right
  if (end > begin) {
    const IndexArray pred = predict(model, rows(data.tokens, begin, end), bf16);
    for (std::size_t i = begin; i < end; ++i) {
      std::size_t r = 0;
      for (std::size_t j = 0; j < L; ++j) r += pred(i - begin, j) == data.targets(i, j);
      counts[0] += double(r);
      counts[1] += r == L;
    }
  }
  world.all_reduce_sum(counts, 2);
  return {counts[0] / double(n * L), counts[1] / double(n)};
}

// The first `n` held-out sequences with the model's predictions: "  3 1 ... -> 1 3 ...  (right)".
inline void print_examples(ToyEncoder& model, const Batch& held_out, bool bf16, std::size_t n) {
  const IndexArray pred = predict(model, held_out.tokens, bf16);
  for (std::size_t i = 0; i < std::min<std::size_t>(n, held_out.tokens.shape(0)); ++i) {
    std::string line = "  ";
    for (std::size_t j = 0; j < held_out.tokens.shape(1); ++j) line += std::to_string(held_out.tokens(i, j)) + " ";
    line += "->";
    bool right = true;
    for (std::size_t j = 0; j < held_out.tokens.shape(1); ++j) {
      line += " " + std::to_string(pred(i, j));
      right = right && pred(i, j) == held_out.targets(i, j);
    }
    std::printf("%s  %s\n", line.c_str(), right ? "(right)" : "(wrong)");
  }
}

#ifdef XGRAD_WITH_ONNX
// --export-onnx: tokens (batch, L) -> logits (batch, L, vocab) with a dynamic batch (L is the
// model's seq_len: it adds the embeddings of positions 0..seq_len-1), and the sample: held-out rows
// at two batch sizes with this program's logits.
inline void export_onnx(ToyEncoder& model, const IndexArray& held_out, const std::string& path) {
  xgrad::onnx::export_model(
      model,
      [&model](const xgrad::onnx::Inputs& in) { return std::vector<Tensor<float>>{model.forward(in.indices(0))}; },
      {rows(held_out, 0, 2)}, path,
      xgrad::onnx::ExportOptions()
          .input_names({"tokens"})
          .output_names({"logits"})
          .dynamic_axes({{"tokens", {{0, "batch"}}}}));
  xgrad::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<onnx_sample::Run> runs;
  for (std::size_t n : {std::size_t(1), std::min<std::size_t>(5, held_out.shape(0))})
    runs.push_back({{{"tokens", rows(held_out, 0, n)}}, {{"logits", model.forward(rows(held_out, 0, n))}}});
  model.train(was_training);
  onnx_sample::write(path, runs);
  std::printf("exported the trained model to %s (ONNX, opset 17), a sample to %s.sample.json\n", path.c_str(),
              path.c_str());
}
#endif

}  // namespace sort_digits
