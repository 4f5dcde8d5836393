#include <xgrad/nn/activation.hpp>
#include <xgrad/core/gradcheck_registry.hpp>

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

// Finite-difference checks of its modules (see xgrad/core/gradcheck_registry.hpp).
XGRAD_GRADCHECKS(nn_activation) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.GELU", "GELU() on (B, L, D)", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::GELU<double>>();
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  checks.add({"nn.ReLU", "ReLU() on (B, L, D)", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::ReLU<double>>();
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D}, Values::away_from_zero);
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
}
