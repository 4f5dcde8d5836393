#include <xgrad/nn/rms_norm.hpp>

#include <xgrad/nn/init.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad::nn {

template <class T>
RMSNorm<T>::RMSNorm(const RMSNormOptions& options) : Module<T>("RMSNorm"), options_(options) {
  XGRAD_CHECK(!options.normalized_shape().empty(), "RMSNorm: normalized_shape must have at least one dim");
  for (const std::int64_t size : options.normalized_shape()) {
    XGRAD_CHECK(size >= 0, "RMSNorm: expected non-negative sizes in normalized_shape, got ",
                options.normalized_shape());
    normalized_shape_.push_back(static_cast<std::size_t>(size));
  }
  if (options.eps()) XGRAD_CHECK(*options.eps() >= 0, "RMSNorm: expected eps >= 0, got ", *options.eps());
  if (options.elementwise_affine()) weight = this->register_parameter("weight", ones<T>(normalized_shape_));
}

template <class T>
void RMSNorm<T>::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

template <class T>
Tensor<T> RMSNorm<T>::forward(const Tensor<T>& input) {
  return rms_norm(input, normalized_shape_, weight, options_.eps());
}

template class RMSNorm<float>;
template class RMSNorm<double>;

}  // namespace xgrad::nn
