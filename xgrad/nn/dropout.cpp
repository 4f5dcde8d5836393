#include <xgrad/nn/dropout.hpp>

namespace xgrad::nn {

template <class T>
Dropout<T>::Dropout(const DropoutOptions& options) : Module<T>("Dropout"), options_(options) {
  XGRAD_CHECK(options.p() >= 0.0 && options.p() <= 1.0,
              "Dropout: dropout probability has to be between 0 and 1, but got ", options.p());
}

template <class T>
Tensor<T> Dropout<T>::forward(const Tensor<T>& input) {
  return dropout(input, options_.p(), this->is_training());
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace xgrad::nn
