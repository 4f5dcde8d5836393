// Higher-order gradients against PyTorch, on whole training computations: the golden files of
// scripts/make_higher_order_fixtures.py, in float64 and float32.
//   hvp:      a Hessian-vector product of a pre-norm TransformerEncoderLayer's MSE loss;
//   wgan_gp:  three AdamW steps of a WGAN-GP critic (a gradient penalty through create_graph);
//   maml:     one MAML step (an inner SGD step with create_graph, the outer gradient to the
//             initial weights).
// Each compares values and gradients as max |xgrad - torch| / max |torch| per tensor.
#include "test_util.hpp"
#include "fixture.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include <xgrad/nn/nn.hpp>
#include <xgrad/optim/optim.hpp>

using namespace xgrad;
using namespace xgrad::testing;
using json = nlohmann::json;

namespace {

template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-9 : 2e-4;
}

// max |a - b| / max |b|; b == 0 everywhere compares absolutely.
template <class T>
void expect_close(const std::string& what, const Array<T>& a, const Array<T>& b) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a.data()[i]) - double(b.data()[i])));
    scale = std::max(scale, std::abs(double(b.data()[i])));
  }
  EXPECT_LE(diff / (scale > 0 ? scale : 1.0), tolerance<T>())
      << what << ": max abs diff " << diff << ", max abs " << scale;
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, double> ? "float64" : "float32";
}

template <class T>
nn::StateDict<T> state_from(const Fixture& f, const std::string& prefix) {
  nn::StateDict<T> state;
  for (auto& [key, value] : f.arrays_with_prefix<T>(prefix)) state.insert(key, value);
  return state;
}

// ---- Hessian-vector product -------------------------------------------------------------------

template <class T>
void hvp_case() {
  const Fixture f = load_fixture(std::string("higher_order_hvp_") + dtype_name<T>());
  const json& o = f.config()["options"];
  nn::TransformerEncoderLayer<T> layer(nn::TransformerEncoderLayerOptions(o["d_model"], o["nhead"])
                                           .dim_feedforward(o["dim_feedforward"])
                                           .dropout(o["dropout"])
                                           .activation(o["activation"])
                                           .layer_norm_eps(o["layer_norm_eps"])
                                           .batch_first(o["batch_first"])
                                           .norm_first(o["norm_first"]));
  layer.load_state_dict(state_from<T>(f, "param."));
  layer.train();
  std::vector<std::string> keys;
  std::vector<Tensor<T>> params;
  for (const auto& [key, p] : layer.named_parameters()) {
    keys.push_back(key);
    params.push_back(p);
  }
  const Tensor<T> output = layer.forward(f.tensor<T>("input"));
  const Tensor<T> loss = mse_loss(output, f.tensor<T>("target"));
  expect_close<T>("output", output.value(), f.array<T>("output"));
  expect_close<T>("loss", loss.value(), f.array<T>("loss"));
  // g = dloss/dtheta with history; H v = d(sum_k g_k . v_k)/dtheta.
  const std::vector<Tensor<T>> g = autograd::grad({loss}, params, {}, std::nullopt, /*create_graph=*/true);
  Tensor<T> gv;
  for (std::size_t k = 0; k < params.size(); ++k) {
    expect_close<T>("grad." + keys[k], g[k].value(), f.array<T>("grad." + keys[k]));
    const Tensor<T> term = sum(g[k] * f.tensor<T>("v." + keys[k]));
    gv = gv.defined() ? gv + term : term;
  }
  const std::vector<Tensor<T>> hv = autograd::grad({gv}, params);
  for (std::size_t k = 0; k < params.size(); ++k)
    expect_close<T>("hvp." + keys[k], hv[k].value(), f.array<T>("hvp." + keys[k]));
}

// ---- WGAN-GP critic ----------------------------------------------------------------------------

template <class T>
void wgan_gp_case() {
  const Fixture f = load_fixture(std::string("higher_order_wgan_gp_") + dtype_name<T>());
  const json& c = f.config();
  const double lambda = c["lambda"];
  nn::Sequential<T> critic;
  critic.push_back(std::make_shared<nn::Linear<T>>(4, 16));
  critic.push_back(std::make_shared<nn::LayerNorm<T>>(nn::LayerNormOptions({16})));
  critic.push_back(std::make_shared<nn::GELU<T>>());
  critic.push_back(std::make_shared<nn::Linear<T>>(16, 1));
  critic.load_state_dict(state_from<T>(f, "param."));
  const json& o = c["optimizer_options"];
  optim::AdamW<T> opt(critic.parameters(), optim::AdamWOptions(o["lr"])
                                               .betas({o["betas"][0], o["betas"][1]})
                                               .eps(o["eps"])
                                               .weight_decay(o["weight_decay"])
                                               .amsgrad(o["amsgrad"]));
  const int steps = c["steps"];
  for (int step = 1; step <= steps; ++step) {
    const std::string s = "step" + std::to_string(step) + ".";
    const Tensor<T> real = f.tensor<T>(s + "real"), fake = f.tensor<T>(s + "fake"), eps = f.tensor<T>(s + "eps");
    opt.zero_grad();
    // x_hat = eps real + (1 - eps) fake, a leaf; its gradient with history gives the penalty.
    Tensor<T> x_hat((eps * real + (T(1) - eps) * fake).value(), /*requires_grad=*/true);
    const Tensor<T> grad_x =
        autograd::grad({sum(critic.forward(x_hat))}, {x_hat}, {}, std::nullopt, /*create_graph=*/true)[0];
    const Tensor<T> norm = sqrt(sum(grad_x * grad_x, {1}));
    const Tensor<T> penalty = mean(pow(norm - T(1), T(2))) * T(lambda);
    const Tensor<T> loss = mean(critic.forward(fake)) - mean(critic.forward(real)) + penalty;
    expect_close<T>(s + "grad_x", grad_x.value(), f.array<T>(s + "grad_x"));
    expect_close<T>(s + "penalty", penalty.value(), f.array<T>(s + "penalty"));
    expect_close<T>(s + "loss", loss.value(), f.array<T>(s + "loss"));
    loss.backward();
    for (const auto& [key, p] : critic.named_parameters())
      expect_close<T>(s + "grad." + key, p.grad(), f.array<T>(s + "grad." + key));
    opt.step();
    for (const auto& [key, p] : critic.named_parameters())
      expect_close<T>(s + "param." + key, p.value(), f.array<T>(s + "param." + key));
  }
}

// ---- MAML ----------------------------------------------------------------------------------------

template <class T>
Tensor<T> maml_forward(const std::vector<Tensor<T>>& p, const Tensor<T>& x) {
  return linear(gelu(linear(x, p[0], p[1])), p[2], p[3]);
}

template <class T>
void maml_case() {
  const Fixture f = load_fixture(std::string("higher_order_maml_") + dtype_name<T>());
  const T inner_lr = T(f.config()["inner_lr"].get<double>());
  const std::vector<std::string> keys = {"0.weight", "0.bias", "2.weight", "2.bias"};
  std::vector<Tensor<T>> theta;
  for (const auto& k : keys) theta.push_back(f.tensor<T>("param." + k, /*requires_grad=*/true));
  const Tensor<T> inner_loss = mse_loss(maml_forward(theta, f.tensor<T>("support_x")), f.tensor<T>("support_y"));
  const std::vector<Tensor<T>> inner_grad = autograd::grad({inner_loss}, theta, {}, std::nullopt, true);
  std::vector<Tensor<T>> adapted;
  for (std::size_t k = 0; k < theta.size(); ++k) adapted.push_back(theta[k] - inner_grad[k] * inner_lr);
  const Tensor<T> outer_loss = mse_loss(maml_forward(adapted, f.tensor<T>("query_x")), f.tensor<T>("query_y"));
  const std::vector<Tensor<T>> outer_grad = autograd::grad({outer_loss}, theta);
  expect_close<T>("inner_loss", inner_loss.value(), f.array<T>("inner_loss"));
  expect_close<T>("outer_loss", outer_loss.value(), f.array<T>("outer_loss"));
  for (std::size_t k = 0; k < keys.size(); ++k) {
    expect_close<T>("inner_grad." + keys[k], inner_grad[k].value(), f.array<T>("inner_grad." + keys[k]));
    expect_close<T>("adapted." + keys[k], adapted[k].value(), f.array<T>("adapted." + keys[k]));
    expect_close<T>("outer_grad." + keys[k], outer_grad[k].value(), f.array<T>("outer_grad." + keys[k]));
  }
}

}  // namespace

TEST(HigherOrderGolden, HessianVectorProductOfAnEncoderLayerFloat64) { hvp_case<double>(); }
TEST(HigherOrderGolden, HessianVectorProductOfAnEncoderLayerFloat32) { hvp_case<float>(); }
TEST(HigherOrderGolden, WganGpCriticThreeAdamWStepsFloat64) { wgan_gp_case<double>(); }
TEST(HigherOrderGolden, WganGpCriticThreeAdamWStepsFloat32) { wgan_gp_case<float>(); }
TEST(HigherOrderGolden, MamlStepFloat64) { maml_case<double>(); }
TEST(HigherOrderGolden, MamlStepFloat32) { maml_case<float>(); }
