// The finite-difference checks of xgrad/ops/shape.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_shape) {
  using namespace xgrad::gradcheck_support;
  using O = xgrad::GradcheckOptions;
  using Sizes = xgrad::GradcheckSizes;
  checks.add(unary("transpose", "transpose(x, 0, 2)", [](const T64& a) { return xgrad::transpose(a, 0, 2); }));
  checks.add(unary("permute", "permute(x, {1, 2, 0})", [](const T64& a) { return xgrad::permute(a, {1, 2, 0}); }));
  checks.add(unary("reshape", "reshape(x, {-1, D})", [](const T64& a) {
    return xgrad::reshape(a, {-1, std::int64_t(a.size(2))});
  }));
  checks.add(unary("view", "view(x, {B, -1})", [](const T64& a) {
    return xgrad::view(a, {std::int64_t(a.size(0)), -1});
  }));
  checks.add(unary("flatten", "flatten(x, 1)", [](const T64& a) { return xgrad::flatten(a, 1); }));
  checks.add(unary("unsqueeze", "unsqueeze(x, 1)", [](const T64& a) { return xgrad::unsqueeze(a, 1); }));
  checks.add(unary("squeeze", "squeeze(unsqueeze(x, 0))",
                   [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, 0)); }));
  checks.add(unary("squeeze_dim", "squeeze(unsqueeze(x, -1), -1)",
                   [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, -1), -1); }));
  checks.add(unary("contiguous", "contiguous(x)", [](const T64& a) { return xgrad::contiguous(a) * 1.0; }));
  checks.add({"expand", "expand(x, (B, L, D)), x (L, 1)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                const std::vector<std::int64_t> to{std::int64_t(s.B), -1, std::int64_t(s.D)};
                return op_check([=](const Inputs& in) { return xgrad::expand(in[0], to); }, {make({s.L, 1})}, o);
              }});
  checks.add({"cat", "cat({a, b, a}, dim 1), a (B, L, D), b (B, 1, D)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [](const Inputs& in) {
                      return xgrad::cat<double>({in[0], in[1], in[0]}, 1);
                    },
                    {make({s.B, s.L, s.D}), make({s.B, 1, s.D})}, o);
              }});
  checks.add({"stack", "stack({a, b}, dim -1), a and b (B, L, D)", [](const Sizes& s, const O& o) {
                Maker make(s.seed);
                return op_check(
                    [](const Inputs& in) {
                      return xgrad::stack<double>({in[0], in[1]}, -1);
                    },
                    {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
              }});
  checks.add(unary("narrow", "narrow(x, 2, 1, D - 1)",
                   [](const T64& a) { return xgrad::narrow(a, 2, 1, std::int64_t(a.size(2)) - 1); }));
  checks.add(unary("slice", "slice(x, -1, 0, -1, 2)", [](const T64& a) { return xgrad::slice(a, -1, 0, -1, 2); }));
}
