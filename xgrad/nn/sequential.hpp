// nn.Sequential (https://pytorch.org/docs/stable/generated/torch.nn.Sequential.html): runs its
// children in order, each child's output feeding the next. Children are named "0", "1", ...
// (so their keys are "0.weight", "2.bias", ...) and must have a single-input forward.
//
// compile: snippet
//   auto ff = std::make_shared<nn::Sequential<float>>(std::vector<std::shared_ptr<nn::Module<float>>>{
//       std::make_shared<nn::Linear<float>>(4, 16), std::make_shared<nn::GELU<float>>(),
//       std::make_shared<nn::Linear<float>>(16, 4)});
//
// nn.ModuleList holds modules the same way, without a forward of its own. Both keep their
// children in one place, detail::ModuleSequence.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <xgrad/nn/module.hpp>

namespace xgrad::detail {

// Children registered in order under the names "0", "1", ...; the storage of Sequential and
// ModuleList. Index errors name the holder's class ("Sequential: index 7 is out of range").
template <class T>
class ModuleSequence : public nn::Module<T> {
 public:
  // Appends `module` under the name str(size()).
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    auto registered = this->register_module(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(registered);
    return registered;
  }
  std::size_t size() const { return modules_.size(); }
  const std::shared_ptr<nn::Module<T>>& operator[](std::size_t i) const;
  // Module i as an M (LibTorch's ModuleList::ptr<M>); throws when it is not one.
  template <class M>
  std::shared_ptr<M> ptr(std::size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    XGRAD_CHECK(m != nullptr, this->name(), ": module ", i, " is a ", (*this)[i]->name(),
                ", not the type asked for");
    return m;
  }

 protected:
  explicit ModuleSequence(std::string name) : nn::Module<T>(std::move(name)) {}
  const std::vector<std::shared_ptr<nn::Module<T>>>& modules() const { return modules_; }

 private:
  std::vector<std::shared_ptr<nn::Module<T>>> modules_;
};

extern template class ModuleSequence<float>;
extern template class ModuleSequence<double>;

}  // namespace xgrad::detail

namespace xgrad::nn {

template <class T = float>
class Sequential : public detail::ModuleSequence<T> {
 public:
  Sequential() : detail::ModuleSequence<T>("Sequential") {}
  explicit Sequential(const std::vector<std::shared_ptr<Module<T>>>& modules);

  Tensor<T> forward(const Tensor<T>& input) override;
};

// nn.ModuleList: holds modules under the names "0", "1", ... without a forward of its own.
template <class T = float>
class ModuleList : public detail::ModuleSequence<T> {
 public:
  ModuleList() : detail::ModuleSequence<T>("ModuleList") {}
};

extern template class Sequential<float>;
extern template class Sequential<double>;
extern template class ModuleList<float>;
extern template class ModuleList<double>;

}  // namespace xgrad::nn
