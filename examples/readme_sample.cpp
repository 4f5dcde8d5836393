// The training step shown in README.md: fits y = 3x + 1 with two parameters.
#include <cmath>
#include <cstdio>

#include <xgrad/xgrad.hpp>

int main() {
  using namespace xgrad;
  manual_seed(0);
  Tensor<float> x = randn<float>({64, 1});
  Tensor<float> y = 3.0f * x + 1.0f;
  Tensor<float> w = zeros<float>({1}, /*requires_grad=*/true);
  Tensor<float> b = zeros<float>({1}, /*requires_grad=*/true);

  for (int step = 0; step < 100; ++step) {
    Tensor<float> loss = mse_loss(x * w + b, y);  // (64, 1) * (1) + (1): broadcast
    w.zero_grad();
    b.zero_grad();
    loss.backward();
    NoGradGuard no_grad;  // plain SGD: p -= lr * dloss/dp
    w.mutable_value() -= 0.1f * w.grad();
    b.mutable_value() -= 0.1f * b.grad();
  }
  std::printf("w = %.4f, b = %.4f\n", w.item(), b.item());  // w = 3.0000, b = 1.0000
  return (std::abs(w.item() - 3.0f) < 1e-3f && std::abs(b.item() - 1.0f) < 1e-3f) ? 0 : 1;
}
