// Uses xgrad as a client would: y = x * x + 3 x, backward, and checks dy/dx = 2 x + 3.
#include <cmath>
#include <cstdio>

#include <xgrad/xgrad.hpp>

int main() {
  auto x = xgrad::from_vector<double>({1.0, -2.0, 0.5}, {3}, /*requires_grad=*/true);
  auto y = x * x + 3.0 * x;
  y.backward(xgrad::ones<double>({3}));

  bool ok = true;
  for (std::size_t i = 0; i < 3; ++i) {
    const double expected = 2.0 * x.value()(i) + 3.0;
    std::printf("x = %5.2f  y = %5.2f  dy/dx = %5.2f (expected %5.2f)\n", x.value()(i), y.value()(i),
                x.grad()(i), expected);
    ok = ok && std::abs(x.grad()(i) - expected) < 1e-12;
  }
  std::printf("%s\n", ok ? "consumer: gradient correct" : "consumer: WRONG gradient");
  return ok ? 0 : 1;
}
