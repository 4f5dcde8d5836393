#include <xgrad/nn/init.hpp>

#include <algorithm>
#include <cmath>

#include <xgrad/base/warning.hpp>
#include <xgrad/nn/no_init_weights.hpp>

namespace xgrad::nn::init {

namespace {
thread_local bool t_skip_init = false;
}  // namespace

NoInitWeights::NoInitWeights() : previous_(t_skip_init) { t_skip_init = true; }
NoInitWeights::~NoInitWeights() { t_skip_init = previous_; }
bool init_weights_enabled() { return !t_skip_init; }

std::pair<double, double> calculate_fan_in_and_fan_out(const ShapeArg& sizes) {
  const Shape& shape = sizes.get("init::calculate_fan_in_and_fan_out");
  XGRAD_CHECK(shape.size() >= 2, "init: fan in and fan out can not be computed for a tensor with fewer "
              "than 2 dimensions, got shape ", shape);
  double receptive = 1;
  for (std::size_t i = 2; i < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[1]) * receptive, static_cast<double>(shape[0]) * receptive};
}

double calculate_gain(const std::string& nonlinearity, double param) {
  if (nonlinearity == "linear" || nonlinearity == "sigmoid" || nonlinearity.rfind("conv", 0) == 0) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nonlinearity == "selu") return 3.0 / 4.0;
  XGRAD_CHECK(false, "init::calculate_gain: unsupported nonlinearity \"", nonlinearity, "\"");
  return 0;
}

template <class T>
Tensor<T> uniform_(Tensor<T> tensor, double a, double b, Generator* generator) {
  XGRAD_CHECK(a <= b, "init::uniform_: expected a <= b, got a=", a, ", b=", b);
  if (t_skip_init) return tensor;
  Generator& gen = generator ? *generator : default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (auto& v : tensor.mutable_value()) v = static_cast<T>(a + (b - a) * gen.uniform());
  return tensor;
}

template <class T>
Tensor<T> normal_(Tensor<T> tensor, double mean, double std, Generator* generator) {
  XGRAD_CHECK(std >= 0, "init::normal_: expected std >= 0, got ", std);
  if (t_skip_init) return tensor;
  Generator& gen = generator ? *generator : default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (auto& v : tensor.mutable_value()) v = static_cast<T>(mean + std * gen.normal());
  return tensor;
}

template <class T>
Tensor<T> constant_(Tensor<T> tensor, double value) {
  Array<T>& a = tensor.mutable_value();
  std::fill(a.begin(), a.end(), static_cast<T>(value));
  return tensor;
}

template <class T>
Tensor<T> zeros_(Tensor<T> tensor) {
  return constant_(std::move(tensor), 0.0);
}

template <class T>
Tensor<T> ones_(Tensor<T> tensor) {
  return constant_(std::move(tensor), 1.0);
}

template <class T>
Tensor<T> xavier_uniform_(Tensor<T> tensor, double gain, Generator* generator) {
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor.shape());
  const double bound = gain * std::sqrt(6.0 / (fan_in + fan_out));
  return uniform_(std::move(tensor), -bound, bound, generator);
}

template <class T>
Tensor<T> kaiming_uniform_(Tensor<T> tensor, double a, const std::string& mode, const std::string& nonlinearity,
                           Generator* generator) {
  XGRAD_CHECK(mode == "fan_in" || mode == "fan_out", "init::kaiming_uniform_: mode ", mode,
              " not supported, please use one of fan_in, fan_out");
  const auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor.shape());
  if (tensor.value().size() == 0) {  // as PyTorch: a warning, and the tensor as it is
    XGRAD_WARN_ONCE("init::kaiming_uniform_: initializing zero-element tensors is a no-op");
    return tensor;
  }
  const double fan = mode == "fan_in" ? fan_in : fan_out;
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan);
  return uniform_(std::move(tensor), -bound, bound, generator);
}

#define XGRAD_INSTANTIATE(T)                                                                          \
  template Tensor<T> uniform_<T>(Tensor<T>, double, double, Generator*);                              \
  template Tensor<T> normal_<T>(Tensor<T>, double, double, Generator*);                               \
  template Tensor<T> constant_<T>(Tensor<T>, double);                                                 \
  template Tensor<T> zeros_<T>(Tensor<T>);                                                            \
  template Tensor<T> ones_<T>(Tensor<T>);                                                             \
  template Tensor<T> xavier_uniform_<T>(Tensor<T>, double, Generator*);                               \
  template Tensor<T> kaiming_uniform_<T>(Tensor<T>, double, const std::string&, const std::string&, Generator*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad::nn::init
