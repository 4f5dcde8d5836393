// nn.Sequential (https://pytorch.org/docs/stable/generated/torch.nn.Sequential.html): runs its
// children in order, each child's output feeding the next. Children are named "0", "1", ...
// (so their keys are "0.weight", "2.bias", ...) and must have a single-input forward.
//
//   auto ff = std::make_shared<nn::Sequential<float>>(std::vector<std::shared_ptr<nn::Module<float>>>{
//       std::make_shared<nn::Linear<float>>(4, 16), std::make_shared<nn::GELU<float>>(),
//       std::make_shared<nn::Linear<float>>(16, 4)});
#pragma once

#include <memory>
#include <vector>

#include <xgrad/nn/module.hpp>

namespace xgrad::nn {

template <class T = float>
class Sequential : public Module<T> {
 public:
  Sequential() : Module<T>("Sequential") {}
  explicit Sequential(const std::vector<std::shared_ptr<Module<T>>>& modules);

  // Appends `module` under the name str(size()).
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    auto registered = this->register_module(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(registered);
    return registered;
  }
  std::size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module<T>>& operator[](std::size_t i) const;

  Tensor<T> forward(const Tensor<T>& input) override;

 private:
  std::vector<std::shared_ptr<Module<T>>> modules_;
};

// nn.ModuleList: holds modules under the names "0", "1", ... without a forward of its own.
template <class T = float>
class ModuleList : public Module<T> {
 public:
  ModuleList() : Module<T>("ModuleList") {}

  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    auto registered = this->register_module(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(registered);
    return registered;
  }
  std::size_t size() const { return modules_.size(); }
  const std::shared_ptr<Module<T>>& operator[](std::size_t i) const;

 private:
  std::vector<std::shared_ptr<Module<T>>> modules_;
};

extern template class Sequential<float>;
extern template class Sequential<double>;
extern template class ModuleList<float>;
extern template class ModuleList<double>;

}  // namespace xgrad::nn
