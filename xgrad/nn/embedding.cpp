#include <xgrad/nn/embedding.hpp>

#include <algorithm>

#include <xgrad/nn/init.hpp>

namespace xgrad::nn {

template <class T>
Embedding<T>::Embedding(const EmbeddingOptions& options) : Module<T>("Embedding"), options_(options) {
  const std::int64_t n = options.num_embeddings();
  XGRAD_CHECK(n >= 0 && options.embedding_dim() >= 0, "Embedding: num_embeddings and embedding_dim must be "
              "non-negative, got ", n, " and ", options.embedding_dim());
  if (options.padding_idx()) {
    const std::int64_t p = *options.padding_idx();
    XGRAD_CHECK(p >= -n && p < n, "Embedding: padding_idx must be within num_embeddings (", n, "), got ", p);
    padding_idx_ = p < 0 ? p + n : p;
  }
  weight = this->register_parameter(
      "weight", zeros<T>({static_cast<std::size_t>(n), static_cast<std::size_t>(options.embedding_dim())}));
  reset_parameters();
}

template <class T>
void Embedding<T>::reset_parameters() {
  init::normal_(weight);
  if (padding_idx_) {
    const std::size_t d = static_cast<std::size_t>(options_.embedding_dim());
    T* row = weight.mutable_value().data() + static_cast<std::size_t>(*padding_idx_) * d;
    std::fill(row, row + d, T(0));
  }
}

template <class T>
Tensor<T> Embedding<T>::forward(const IndexArray& indices) {
  return embedding(indices, weight, padding_idx_);
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace xgrad::nn
