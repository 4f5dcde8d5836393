#include <xgrad/nn/dropout.hpp>
#include <xgrad/core/gradcheck_registry.hpp>

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

// Finite-difference checks of its modules (see xgrad/core/gradcheck_registry.hpp).
XGRAD_GRADCHECKS(nn_dropout) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Dropout", "Dropout(0.3) in training, default generator re-seeded", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::Dropout<double>>(0.3);
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
               }});
}
