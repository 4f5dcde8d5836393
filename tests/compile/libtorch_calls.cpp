// Calls written as a LibTorch user writes them, with std::int64_t sizes and dims (what size(),
// sizes(), dim() and numel() return): each must compile without a narrowing error. ctest
// compile_libtorch_calls builds this file with the tree's compiler, and compile_libtorch_calls_clang
// with clang++ where it is installed, both with -Wall -Werror=narrowing (tests/CMakeLists.txt).
// zeros<float>({x.size(0), 3}) used to be a narrowing error under clang (the factories took a
// Shape of std::size_t), as was layer_norm(x, {x.size(-1)}).
#include <cstdint>
#include <utility>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace nn = xgrad::nn;
using xgrad::Tensor;

void factories(const Tensor<float>& x, std::int64_t n, std::int64_t d) {
  xgrad::zeros<float>({x.size(0), 3});
  xgrad::randn<float>({n, d});
  xgrad::randn<float>({n, d}, /*requires_grad=*/true);
  xgrad::rand<double>({x.size(-1)});
  xgrad::ones<float>({n, x.size(1), 2});
  xgrad::full<float>({n, d}, 0.5f);
  xgrad::from_vector<float>(std::vector<float>(static_cast<std::size_t>(n * d)), {n, d});
  xgrad::arange<float>(0, static_cast<float>(n));
  xgrad::Generator g(0);
  xgrad::randn<float>({n, d}, g);
  // A tensor's sizes go back into a factory as they are, or element by element.
  xgrad::zeros<float>(x.sizes());
  xgrad::ones<float>(x.shape());
  const auto s = x.sizes();
  xgrad::zeros<float>({s[0], s[1] * 2});
  const std::vector<std::int64_t> v = x.sizes();
  xgrad::rand<float>(v);
  xgrad::zeros<float>({x.numel()});
  xgrad::zeros<float>({x.dim(), n});
}

void sizes(const Tensor<float>& x) {
  const xgrad::Sizes s = x.sizes();
  std::int64_t rows = s[0];
  rows = x.shape()[0] * 2;  // std::int64_t, as LibTorch's sizes()
  (void)rows;
  const std::vector<std::int64_t> copy = x.sizes().vec();
  (void)copy;
  const bool same = x.sizes() == std::vector<std::int64_t>{2, 3} && x.sizes() == x.shape();
  (void)same;
  const xgrad::Shape shape = x.sizes();  // where std::size_t sizes are needed
  (void)shape;
}

void shape_ops(const Tensor<float>& x, std::int64_t n, std::int64_t d) {
  const std::int64_t b = x.size(0);
  xgrad::reshape(x, {b, -1});
  xgrad::reshape(x, x.sizes());
  xgrad::view(x, {n, d});
  xgrad::permute(x, {x.dim() - 1, 0});
  xgrad::transpose(x, 0, x.dim() - 1);
  xgrad::narrow(x, 0, 0, n);
  xgrad::slice(x, 1, 0, d, 2);
  xgrad::expand(xgrad::unsqueeze(x, 0), {n, b, x.size(1)});
  xgrad::flatten(x, 0, d);
  xgrad::sum(x, {d - 1});
  xgrad::mean(x, {0, d}, /*keepdim=*/true);
  xgrad::softmax(x, d);
  xgrad::cat<float>({x, x}, d);
  xgrad::layer_norm(x, {x.size(-1)});
  xgrad::layer_norm(x, {d});
  xgrad::layer_norm(x, x.sizes());
}

void modules(std::int64_t n, std::int64_t d, std::int64_t h) {
  nn::Linear<float> linear(n, d);
  nn::Linear<float> no_bias(nn::LinearOptions(n, d).bias(false));
  nn::Embedding<float> embedding(n, d);
  nn::LayerNorm<float> norm(nn::LayerNormOptions({n, d}));
  nn::LayerNorm<float> norm2(std::vector<std::int64_t>{n, d});
  nn::MultiheadAttention<float> mha(d, h);
  nn::TransformerEncoderLayer<float> layer(nn::TransformerEncoderLayerOptions(d, h).dim_feedforward(4 * d));
  nn::TransformerDecoderLayer<float> dlayer(nn::TransformerDecoderLayerOptions(d, h).dim_feedforward(n));
  nn::Transformer<float> transformer(nn::TransformerOptions<float>(d, h).num_encoder_layers(n).num_decoder_layers(n));
  nn::init::calculate_fan_in_and_fan_out({d, n});
  nn::init::calculate_fan_in_and_fan_out(linear.weight);
  nn::init::calculate_fan_in_and_fan_out(linear.weight.sizes());
  xgrad::data::DataLoaderOptions().batch_size(static_cast<std::size_t>(n));  // size_t, as LibTorch's
}
