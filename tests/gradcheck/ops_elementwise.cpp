// The finite-difference checks of xgrad/ops/elementwise.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>
#include <xgrad/ops/silu_mul.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_elementwise) {
  using namespace xgrad::gradcheck_support;
  return {
      binary("add", [](const T64& a, const T64& b) { return xgrad::add(a, b); }),
      binary("sub", [](const T64& a, const T64& b) { return xgrad::sub(a, b); }),
      binary("mul", [](const T64& a, const T64& b) { return xgrad::mul(a, b); }),
      binary(
          "div", [](const T64& a, const T64& b) { return xgrad::div(a, b); }, Values::positive),
      unary("add_scalar", "x + 1.5", [](const T64& a) { return xgrad::add(a, 1.5); }),
      unary("mul_scalar", "x * -2.5", [](const T64& a) { return xgrad::mul(a, -2.5); }),
      unary("rsub", "2 - x", [](const T64& a) { return xgrad::rsub(a, 2.0); }),
      unary(
          "rdiv", "2 / x, x > 0", [](const T64& a) { return xgrad::rdiv(a, 2.0); }, Values::positive),
      unary("neg", "-x", [](const T64& a) { return xgrad::neg(a); }),
      unary(
          "pow", "pow(x, 2.5), x > 0", [](const T64& a) { return xgrad::pow(a, 2.5); }, Values::positive),
      unary("exp", "exp(x)", [](const T64& a) { return xgrad::exp(a); }),
      unary(
          "log", "log(x), x > 0", [](const T64& a) { return xgrad::log(a); }, Values::positive),
      unary(
          "sqrt", "sqrt(x), x > 0", [](const T64& a) { return xgrad::sqrt(a); }, Values::positive),
      unary(
          "abs", "abs(x), |x| > 0.1", [](const T64& a) { return xgrad::abs(a); }, Values::away_from_zero),
      unary("tanh", "tanh(x)", [](const T64& a) { return xgrad::tanh(a); }),
      unary("sigmoid", "sigmoid(x)", [](const T64& a) { return xgrad::sigmoid(a); }),
      unary("silu", "silu(x)", [](const T64& a) { return xgrad::silu(a); }),
      {"silu_mul", "silu_mul(gate (B, L, F), up (B, L, F))",
       [](const Inputs& in, const SampleInput&) { return xgrad::silu_mul(in[0], in[1]); },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.F}), make({s.B, s.L, s.F})}};
       }},
      unary(
          "relu", "relu(x), |x| > 0.1", [](const T64& a) { return xgrad::relu(a); }, Values::away_from_zero),
      unary("gelu", "gelu(x)", [](const T64& a) { return xgrad::gelu(a); }),
      unary("gelu_tanh", "gelu(x, \"tanh\")", [](const T64& a) { return xgrad::gelu(a, "tanh"); }),
      unary("clamp", "clamp(x, -0.55, 0.45)", [](const T64& a) { return xgrad::clamp<double>(a, -0.55, 0.45); }),
  };
}
