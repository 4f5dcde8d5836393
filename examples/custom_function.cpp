// A user-defined differentiable op with its own kernel: a fused SiLU, y = x * sigmoid(x), written
// as an autograd::Function and checked against finite differences. Exits 1 if the check fails.
#include <xgrad/xgrad.hpp>

#include <cmath>
#include <iostream>

using xgrad::Array;
using xgrad::Tensor;
using xgrad::autograd::AutogradContext;

// x: any shape -> y: same shape. dy/dx = s (1 + x (1 - s)), s = sigmoid(x); saves x.
template <class T>
struct FusedSiLU : xgrad::autograd::Function<FusedSiLU<T>> {
  // backward computes on raw arrays: a second differentiation (create_graph) is refused by name.
  static constexpr bool once_differentiable = true;
  static Tensor<T> forward(AutogradContext<T>* ctx, const Tensor<T>& x) {
    ctx->save_for_backward({x});
    Array<T> y = Array<T>::from_shape(x.value().shape());
    const T* px = x.value().data();
    for (std::size_t i = 0; i < y.size(); ++i) y.data()[i] = px[i] / (T(1) + std::exp(-px[i]));
    return Tensor<T>(std::move(y));
  }
  static std::vector<Tensor<T>> backward(AutogradContext<T>* ctx, std::vector<Tensor<T>> grad_outputs) {
    Tensor<T> x = ctx->get_saved_variables()[0];
    const T* px = x.value().data();
    const T* pg = grad_outputs[0].value().data();
    Array<T> dx = Array<T>::from_shape(x.value().shape());
    for (std::size_t i = 0; i < dx.size(); ++i) {
      T s = T(1) / (T(1) + std::exp(-px[i]));
      dx.data()[i] = pg[i] * s * (T(1) + px[i] * (T(1) - s));
    }
    return {Tensor<T>(std::move(dx))};
  }
};

int main() {
  auto x = xgrad::randn<double>({4, 5}, /*requires_grad=*/true);
  auto result = xgrad::gradcheck(
      [](const std::vector<Tensor<double>>& in) { return FusedSiLU<double>::apply(in[0]); }, {x});
  std::cout << result.summary() << "custom_function gradcheck: " << (result.passed ? "PASS" : "FAIL") << "\n";
  return result.passed ? 0 : 1;
}
