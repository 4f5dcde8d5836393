#include <xgrad/nn/activation.hpp>

namespace xgrad::nn {

template <class T>
GELU<T>::GELU(const GELUOptions& options) : Module<T>("GELU"), options_(options) {
  XGRAD_CHECK(options.approximate() == "none" || options.approximate() == "tanh",
              "GELU: approximate must be \"none\" or \"tanh\", got \"", options.approximate(), "\"");
}

template <class T>
Tensor<T> GELU<T>::forward(const Tensor<T>& input) {
  return gelu(input, options_.approximate());
}

template <class T>
Tensor<T> ReLU<T>::forward(const Tensor<T>& input) {
  return relu(input);
}

template class GELU<float>;
template class GELU<double>;
template class ReLU<float>;
template class ReLU<double>;

}  // namespace xgrad::nn
