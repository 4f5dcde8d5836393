#include <xgrad/nn/layer_norm.hpp>

#include <xgrad/nn/init.hpp>

namespace xgrad::nn {

template <class T>
LayerNorm<T>::LayerNorm(const LayerNormOptions& options) : Module<T>("LayerNorm"), options_(options) {
  XGRAD_CHECK(!options.normalized_shape().empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (const std::int64_t size : options.normalized_shape()) {
    XGRAD_CHECK(size >= 0, "LayerNorm: expected non-negative sizes in normalized_shape, got ",
                options.normalized_shape());
    normalized_shape_.push_back(static_cast<std::size_t>(size));
  }
  XGRAD_CHECK(options.eps() >= 0, "LayerNorm: eps must be non-negative, got ", options.eps());
  if (options.elementwise_affine()) {
    weight = this->register_parameter("weight", ones<T>(normalized_shape_));
    if (options.bias()) bias = this->register_parameter("bias", zeros<T>(normalized_shape_));
  }
}

template <class T>
void LayerNorm<T>::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

template <class T>
Tensor<T> LayerNorm<T>::forward(const Tensor<T>& input) {
  return layer_norm(input, normalized_shape_, weight, bias, options_.eps());
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace xgrad::nn
