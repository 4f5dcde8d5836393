#include <xgrad/nn/sequential.hpp>
#include <xgrad/core/gradcheck_registry.hpp>
#include <xgrad/nn/activation.hpp>  // the checks: Sequential(Linear, GELU, Linear)
#include <xgrad/nn/linear.hpp>

namespace xgrad {

template <class T>
const std::shared_ptr<nn::Module<T>>& detail::ModuleSequence<T>::operator[](std::size_t i) const {
  XGRAD_CHECK(i < modules_.size(), this->name(), ": index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

template class detail::ModuleSequence<float>;
template class detail::ModuleSequence<double>;

namespace nn {

template <class T>
Sequential<T>::Sequential(const std::vector<std::shared_ptr<Module<T>>>& modules) : Sequential() {
  for (const auto& m : modules) this->push_back(m);
}

template <class T>
Tensor<T> Sequential<T>::forward(const Tensor<T>& input) {
  Tensor<T> x = input;
  for (const auto& m : this->modules()) x = m->forward(x);
  return x;
}

template class Sequential<float>;
template class Sequential<double>;
template class ModuleList<float>;
template class ModuleList<double>;

}  // namespace nn
}  // namespace xgrad

// Finite-difference checks of its modules (see xgrad/core/gradcheck_registry.hpp).
XGRAD_GRADCHECKS(nn_sequential) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  namespace nn = xgrad::nn;
  checks.add({"nn.Sequential", "Sequential(Linear(D, F), GELU, Linear(F, D))", [](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::Sequential<double>>();
                 m->push_back(std::make_shared<nn::Linear<double>>(s.D, s.F));
                 m->push_back(std::make_shared<nn::GELU<double>>());
                 m->push_back(std::make_shared<nn::Linear<double>>(s.F, s.D));
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
}
