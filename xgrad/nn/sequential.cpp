#include <xgrad/nn/sequential.hpp>

namespace xgrad::nn {

template <class T>
Sequential<T>::Sequential(const std::vector<std::shared_ptr<Module<T>>>& modules) : Sequential() {
  for (const auto& m : modules) push_back(m);
}

template <class T>
const std::shared_ptr<Module<T>>& Sequential<T>::operator[](std::size_t i) const {
  XGRAD_CHECK(i < modules_.size(), "Sequential: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

template <class T>
Tensor<T> Sequential<T>::forward(const Tensor<T>& input) {
  Tensor<T> x = input;
  for (const auto& m : modules_) x = m->forward(x);
  return x;
}

template <class T>
const std::shared_ptr<Module<T>>& ModuleList<T>::operator[](std::size_t i) const {
  XGRAD_CHECK(i < modules_.size(), "ModuleList: index ", i, " is out of range for ", modules_.size(), " modules");
  return modules_[i];
}

template class Sequential<float>;
template class Sequential<double>;
template class ModuleList<float>;
template class ModuleList<double>;

}  // namespace xgrad::nn
