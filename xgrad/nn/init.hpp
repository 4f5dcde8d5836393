// torch.nn.init: in-place initializers of a parameter's values, drawing from `generator` or,
// when null, the default generator (seeded by xgrad::manual_seed). Each returns its tensor
// (a handle aliasing the argument). Values are written without building a graph.
#pragma once

#include <string>

#include <xgrad/ops/ops.hpp>
#include <xgrad/base/random.hpp>

namespace xgrad::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (tensors of >= 2 dims);
// of the sizes ({out, in}, t.sizes() or a Shape; a negative size throws) or of the tensor's.
std::pair<double, double> calculate_fan_in_and_fan_out(const ShapeArg& sizes);
template <class T>
std::pair<double, double> calculate_fan_in_and_fan_out(const Tensor<T>& tensor) {
  return calculate_fan_in_and_fan_out(tensor.sizes());
}
// The recommended gain of `nonlinearity` ("linear", "sigmoid", "tanh", "relu", "leaky_relu"
// with negative slope `param`, "conv*d", "selu").
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

// U(a, b).
template <class T>
Tensor<T> uniform_(Tensor<T> tensor, double a = 0.0, double b = 1.0, Generator* generator = nullptr);
// N(mean, std^2).
template <class T>
Tensor<T> normal_(Tensor<T> tensor, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
template <class T> Tensor<T> constant_(Tensor<T> tensor, double value);
template <class T> Tensor<T> zeros_(Tensor<T> tensor);
template <class T> Tensor<T> ones_(Tensor<T> tensor);
// U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
template <class T>
Tensor<T> xavier_uniform_(Tensor<T> tensor, double gain = 1.0, Generator* generator = nullptr);
// U(-b, b), b = gain(nonlinearity, a) * sqrt(3 / fan), fan = fan_in or fan_out by `mode`.
// nn.Linear's weight uses a = sqrt(5), which gives b = 1 / sqrt(in_features).
template <class T>
Tensor<T> kaiming_uniform_(Tensor<T> tensor, double a = 0.0, const std::string& mode = "fan_in",
                           const std::string& nonlinearity = "leaky_relu", Generator* generator = nullptr);

}  // namespace xgrad::nn::init
