// The same fused op, y = x * sigmoid(x), built two ways: with make_result (the library's own
// path) and as an autograd::Function. Forward + backward per call, interleaved rounds, median
// microseconds per call of each and their ratio, for a small, a medium and a large tensor.
#include <xgrad/xgrad.hpp>

#include "bench_util.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

using xgrad::Array;
using xgrad::Node;
using xgrad::Tensor;
using xgrad::autograd::AutogradContext;

using xgrad::bench::median;
using xgrad::bench::time_us;

namespace {

void silu_forward(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}
void silu_backward(const float* x, const float* g, float* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float s = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = g[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}

Tensor<float> silu_make_result(const Tensor<float>& x) {
  Array<float> y = Array<float>::from_shape(x.value().shape());
  silu_forward(x.value().data(), y.data(), y.size());
  return xgrad::make_result<float>("silu", std::move(y), {x}, [](Node<float>& out) {
    const Array<float>& xv = out.input_value(0);
    Array<float> dx = Array<float>::from_shape(xv.shape());
    silu_backward(xv.data(), out.grad.data(), dx.data(), dx.size());
    out.input(0).accumulate_grad(std::move(dx));
  });
}

struct SiLU : xgrad::autograd::Function<SiLU> {
  static constexpr bool once_differentiable = true;  // backward on raw arrays
  static Tensor<float> forward(AutogradContext<float>* ctx, const Tensor<float>& x) {
    ctx->save_for_backward({x});
    Array<float> y = Array<float>::from_shape(x.value().shape());
    silu_forward(x.value().data(), y.data(), y.size());
    return Tensor<float>(std::move(y));
  }
  static std::vector<Tensor<float>> backward(AutogradContext<float>* ctx, std::vector<Tensor<float>> g) {
    Tensor<float> x = ctx->get_saved_variables()[0];
    Array<float> dx = Array<float>::from_shape(x.value().shape());
    silu_backward(x.value().data(), g[0].value().data(), dx.data(), dx.size());
    return {Tensor<float>(std::move(dx))};
  }
};

}  // namespace

int main() {
  for (std::size_t n : {std::size_t(64), std::size_t(4096), std::size_t(1) << 18}) {
    auto x = xgrad::randn<float>({n}, true);
    const xgrad::Tensor<float> g = xgrad::ones<float>({n});
    const int calls = n <= 64 ? 20000 : n <= 4096 ? 2000 : 50;
    std::vector<double> a, b;
    for (int round = 0; round < 11; ++round) {
      a.push_back(time_us([&] { silu_make_result(x).backward(g); }, calls));
      b.push_back(time_us([&] { SiLU::apply(x).backward(g); }, calls));
    }
    const double ma = median(a), mb = median(b);
    std::printf("n=%-7zu make_result %9.2f us  Function %9.2f us  Function/make_result %.2f  (median of 11 interleaved rounds)\n",
                n, ma, mb, mb / ma);
  }
  return 0;
}
