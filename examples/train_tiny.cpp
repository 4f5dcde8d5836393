// Trains a small MLP end to end: x -> linear(1, 32) -> gelu -> linear(32, 1), written with xgrad's
// functional autograd ops, fitted to y = sin(x) on 64 points of [-pi, pi], full batch, 300 steps
// of Adam. The loop is xgrad::train::Trainer's (steps, a progress line every 50 steps, the final
// evaluation); it writes no file (no checkpoint, no CSV). Exits with 1 unless the final loss is
// below 1% of the initial one.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <xgrad/train/trainer.hpp>
#include <xgrad/xgrad.hpp>

namespace {

using xgrad::Tensor;

// nn.Linear's initialization: weight (out, in) and bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)).
Tensor<float> uniform(const xgrad::Shape& shape, std::size_t fan_in) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return Tensor<float>((xgrad::rand<float>(shape).value() * 2.0f - 1.0f) * bound);
}

// The MLP as functional ops over four registered parameters (a Module, so that the optimizer and
// the Trainer see them).
class SineMLP : public xgrad::nn::Module<float> {
 public:
  explicit SineMLP(std::size_t hidden) : Module("SineMLP") {
    w1_ = register_parameter("w1", uniform({hidden, 1}, 1));
    b1_ = register_parameter("b1", uniform({hidden}, 1));
    w2_ = register_parameter("w2", uniform({1, hidden}, hidden));
    b2_ = register_parameter("b2", uniform({1}, hidden));
  }
  // (N, 1) -> (N, hidden) -> (N, hidden) -> (N, 1)
  Tensor<float> forward(const Tensor<float>& x) {
    return xgrad::linear(xgrad::gelu(xgrad::linear(x, w1_, b1_)), w2_, b2_);
  }

 private:
  Tensor<float> w1_, b1_, w2_, b2_;
};

}  // namespace

int main() {
  xgrad::allocator_tuning_from_env();  // keep freed tensor memory for the next step
  constexpr std::size_t points = 64, hidden = 32;
  const float pi = std::acos(-1.0f);

  // x: (64, 1) evenly spaced on [-pi, pi]; y = sin(x): (64, 1).
  std::vector<float> xs(points), ys(points);
  for (std::size_t i = 0; i < points; ++i) {
    xs[i] = -pi + 2.0f * pi * static_cast<float>(i) / static_cast<float>(points - 1);
    ys[i] = std::sin(xs[i]);
  }
  const Tensor<float> x = xgrad::from_vector<float>(xs, {points, 1});
  const Tensor<float> y = xgrad::from_vector<float>(ys, {points, 1});

  xgrad::train::Settings settings;  // nothing saved: no checkpoint
  xgrad::train::TrainerOptions options;
  options.max_steps = 300;
  options.val_check_interval = 50;
  options.metric.column = "mse";  // the full batch's loss after the step (the CSV's column, were there one)
  options.metric.format = [](double mse) {
    char text[32];
    std::snprintf(text, sizeof text, "mse %.6f", mse);
    return std::string(text);
  };
  return xgrad::train::guarded("train_tiny", [&] {
    xgrad::train::Trainer trainer("train_tiny", options, settings);
    trainer.seed_everything(0);
    SineMLP model(hidden);
    xgrad::optim::Adam<float> optimizer(model.parameters(), xgrad::optim::AdamOptions(0.01));
    const auto mse = [&] { return double(xgrad::mse_loss(model.forward(x), y).item()); };
    const double first_loss = mse();
    trainer.fit(
        model, optimizer, nullptr, [&](int) { return xgrad::mse_loss(model.forward(x), y); }, mse);
    const double loss = mse();
    trainer.finish();
    std::printf("final loss %.6f (initial %.6f) after %d steps\n", loss, first_loss, trainer.global_step());
    const bool learned = std::isfinite(loss) && loss < 0.01 * first_loss;
    if (!learned) std::printf("train_tiny: the loss did not fall below 1%% of its initial value\n");
    return learned ? 0 : 1;
  });
}
