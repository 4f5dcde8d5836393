// Trains a small MLP end to end with xgrad's autograd ops alone: x -> linear(1, 32) -> gelu ->
// linear(32, 1) fitted to y = sin(x) on 64 points of [-pi, pi], full batch, 300 steps of Adam
// written out by hand. Prints the loss every 50 steps; exits with 1 unless the final loss is
// below 1% of the initial one.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace {

using xgrad::Tensor;

// nn.Linear's initialization: weight (out, in) and bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)).
Tensor<float> uniform_parameter(const xgrad::Shape& shape, std::size_t fan_in) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  xgrad::Array<float> value = (xgrad::rand<float>(shape).value() * 2.0f - 1.0f) * bound;
  return Tensor<float>(std::move(value), /*requires_grad=*/true);
}

// torch.optim.Adam with its defaults (betas 0.9, 0.999, eps 1e-8, no weight decay):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
class Adam {
 public:
  Adam(std::vector<Tensor<float>> params, float lr) : params_(std::move(params)), lr_(lr) {
    for (const auto& p : params_) {
      m_.emplace_back(p.numel(), 0.0f);
      v_.emplace_back(p.numel(), 0.0f);
    }
  }

  void zero_grad() {
    for (auto& p : params_) p.zero_grad(/*set_to_none=*/true);
  }

  void step() {
    xgrad::NoGradGuard no_grad;
    ++t_;
    const float correction1 = 1.0f - std::pow(beta1_, static_cast<float>(t_));
    const float correction2 = 1.0f - std::pow(beta2_, static_cast<float>(t_));
    for (std::size_t i = 0; i < params_.size(); ++i) {
      float* p = params_[i].mutable_value().data();
      const float* g = params_[i].grad().data();
      float* m = m_[i].data();
      float* v = v_[i].data();
      for (std::size_t j = 0; j < m_[i].size(); ++j) {
        m[j] = beta1_ * m[j] + (1.0f - beta1_) * g[j];
        v[j] = beta2_ * v[j] + (1.0f - beta2_) * g[j] * g[j];
        p[j] -= lr_ * (m[j] / correction1) / (std::sqrt(v[j] / correction2) + eps_);
      }
    }
  }

 private:
  std::vector<Tensor<float>> params_;
  std::vector<std::vector<float>> m_, v_;
  float lr_;
  float beta1_ = 0.9f, beta2_ = 0.999f, eps_ = 1e-8f;
  long t_ = 0;
};

}  // namespace

int main() {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  constexpr std::size_t points = 64, hidden = 32;
  constexpr int steps = 300;
  const float pi = std::acos(-1.0f);
  xgrad::manual_seed(0);

  // x: (64, 1) evenly spaced on [-pi, pi]; y = sin(x): (64, 1).
  std::vector<float> xs(points), ys(points);
  for (std::size_t i = 0; i < points; ++i) {
    xs[i] = -pi + 2.0f * pi * static_cast<float>(i) / static_cast<float>(points - 1);
    ys[i] = std::sin(xs[i]);
  }
  const Tensor<float> x = xgrad::from_vector<float>(xs, {points, 1});
  const Tensor<float> y = xgrad::from_vector<float>(ys, {points, 1});

  Tensor<float> w1 = uniform_parameter({hidden, 1}, 1), b1 = uniform_parameter({hidden}, 1);
  Tensor<float> w2 = uniform_parameter({1, hidden}, hidden), b2 = uniform_parameter({1}, hidden);
  Adam optimizer({w1, b1, w2, b2}, /*lr=*/0.01f);

  const auto start = std::chrono::steady_clock::now();
  float first_loss = 0.0f, loss_value = 0.0f;
  for (int step = 0; step <= steps; ++step) {
    // (64, 1) -> (64, 32) -> (64, 32) -> (64, 1)
    Tensor<float> prediction = xgrad::linear(xgrad::gelu(xgrad::linear(x, w1, b1)), w2, b2);
    Tensor<float> loss = xgrad::mse_loss(prediction, y);
    loss_value = loss.item();
    if (step == 0) first_loss = loss_value;
    if (step % 50 == 0) std::printf("step %3d  loss %.6f\n", step, loss_value);
    if (step == steps) break;  // the loss after the last update
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("final loss %.6f (initial %.6f) after %d steps in %.1f ms\n", loss_value, first_loss, steps, ms);

  const bool learned = std::isfinite(loss_value) && loss_value < 0.01f * first_loss;
  if (!learned) std::printf("train_tiny: the loss did not fall below 1%% of its initial value\n");
  return learned ? 0 : 1;
}
