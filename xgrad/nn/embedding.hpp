// nn.Embedding (https://pytorch.org/docs/stable/generated/torch.nn.Embedding.html): a lookup
// table. indices of any shape -> (*indices.shape, embedding_dim); weight
// (num_embeddings, embedding_dim) ~ N(0, 1), with the padding_idx row zeroed. The padding row
// gets no gradient, so it stays what it is.
#pragma once

#include <cstdint>
#include <optional>

#include <xgrad/arg.hpp>
#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

struct EmbeddingOptions {
  EmbeddingOptions(std::int64_t num_embeddings, std::int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  XGRAD_ARG(std::int64_t, num_embeddings);
  XGRAD_ARG(std::int64_t, embedding_dim);
  // May be negative (counted from num_embeddings), as in PyTorch.
  XGRAD_ARG(std::optional<std::int64_t>, padding_idx) = std::nullopt;
};

template <class T = float>
class Embedding : public Module<T> {
 public:
  explicit Embedding(const EmbeddingOptions& options);
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}

  Tensor<T> forward(const IndexArray& indices);
  // weight ~ N(0, 1), padding row zeroed.
  void reset_parameters();
  const EmbeddingOptions& options() const { return options_; }
  // padding_idx made non-negative (nullopt without one).
  std::optional<std::int64_t> padding_idx() const { return padding_idx_; }

  Tensor<T> weight;  // (num_embeddings, embedding_dim)

 private:
  EmbeddingOptions options_;
  std::optional<std::int64_t> padding_idx_;
};

extern template class Embedding<float>;
extern template class Embedding<double>;

}  // namespace xgrad::nn
