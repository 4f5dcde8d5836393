#include <xgrad/nn/sequential.hpp>
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
