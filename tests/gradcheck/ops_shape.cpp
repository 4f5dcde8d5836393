// The finite-difference checks of xgrad/ops/shape.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <cstdint>
#include <vector>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_shape) {
  using namespace xgrad::gradcheck_support;
  return {
      unary("transpose", "transpose(x, 0, 2)", [](const T64& a) { return xgrad::transpose(a, 0, 2); }),
      unary("permute", "permute(x, {1, 2, 0})",
            [](const T64& a) {
              return xgrad::permute(a, {1, 2, 0});
            }),
      unary("reshape", "reshape(x, {-1, D})",
            [](const T64& a) {
              return xgrad::reshape(a, {-1, std::int64_t(a.size(2))});
            }),
      unary("view", "view(x, {B, -1})",
            [](const T64& a) {
              return xgrad::view(a, {std::int64_t(a.size(0)), -1});
            }),
      unary("flatten", "flatten(x, 1)", [](const T64& a) { return xgrad::flatten(a, 1); }),
      unary("unsqueeze", "unsqueeze(x, 1)", [](const T64& a) { return xgrad::unsqueeze(a, 1); }),
      unary("squeeze", "squeeze(unsqueeze(x, 0))", [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, 0)); }),
      unary("squeeze_dim", "squeeze(unsqueeze(x, -1), -1)",
            [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, -1), -1); }),
      unary("contiguous", "contiguous(x)", [](const T64& a) { return xgrad::contiguous(a) * 1.0; }),
      {"expand", "expand(x, (B, L, D)), x (L, 1)",
       [](const Inputs& in, const SampleInput& sample) {
         const std::vector<std::int64_t> to{std::int64_t(sample.sizes.B), -1, std::int64_t(sample.sizes.D)};
         return xgrad::expand(in[0], to);
       },
       [](const Sizes& s) {
         return SampleInput{{Maker(s.seed)({s.L, 1})}};
       }},
      {"cat", "cat({a, b, a}, dim 1), a (B, L, D), b (B, 1, D)",
       [](const Inputs& in, const SampleInput&) {
         return xgrad::cat<double>({in[0], in[1], in[0]}, 1);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, 1, s.D})}};
       }},
      {"stack", "stack({a, b}, dim -1), a and b (B, L, D)",
       [](const Inputs& in, const SampleInput&) {
         return xgrad::stack<double>({in[0], in[1]}, -1);
       },
       [](const Sizes& s) {
         Maker make(s.seed);
         return SampleInput{{make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}};
       }},
      unary("narrow", "narrow(x, 2, 1, D - 1)",
            [](const T64& a) { return xgrad::narrow(a, 2, 1, std::int64_t(a.size(2)) - 1); }),
      unary("slice", "slice(x, -1, 0, -1, 2)", [](const T64& a) { return xgrad::slice(a, -1, 0, -1, 2); }),
  };
}
