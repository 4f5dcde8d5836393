#include <xgrad/nn/linear.hpp>

#include <cmath>

#include <xgrad/nn/init.hpp>

namespace xgrad::nn {

template <class T>
Linear<T>::Linear(const LinearOptions& options) : Module<T>("Linear"), options_(options) {
  XGRAD_CHECK(options.in_features() >= 0 && options.out_features() >= 0,
              "Linear: in_features and out_features must be non-negative, got ", options.in_features(), " and ",
              options.out_features());
  const auto in = static_cast<std::size_t>(options.in_features());
  const auto out = static_cast<std::size_t>(options.out_features());
  weight = this->register_parameter("weight", zeros<T>({out, in}));
  if (options.bias()) bias = this->register_parameter("bias", zeros<T>({out}));
  reset_parameters();
}

template <class T>
void Linear<T>::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double fan_in = static_cast<double>(options_.in_features());
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(fan_in) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

template <class T>
Tensor<T> Linear<T>::forward(const Tensor<T>& input) {
  XGRAD_CHECK(input.dim() >= 1 && input.size(-1) == options_.in_features(),
              "Linear: expected input of shape (*, ", options_.in_features(), "), got ", input.shape());
  return adapter_ ? adapter_->forward_linear(input, weight, bias) : linear(input, weight, bias);
}

template class Linear<float>;
template class Linear<double>;

}  // namespace xgrad::nn
