// The finite-difference checks of xgrad/ops/reduction.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_reduction) {
  using namespace xgrad::gradcheck_support;
  checks.add(unary("sum", "sum(x)", [](const T64& a) { return xgrad::sum(a); }));
  checks.add(unary("sum_dims", "sum(x, {0, -1}, keepdim)", [](const T64& a) { return xgrad::sum(a, {0, -1}, true); }));
  checks.add(unary("mean", "mean(x)", [](const T64& a) { return xgrad::mean(a); }));
  checks.add(unary("mean_dims", "mean(x, {1})", [](const T64& a) { return xgrad::mean(a, {1}); }));
  checks.add(unary("var", "var(x)", [](const T64& a) { return xgrad::var(a); }));
  checks.add(unary("var_dims", "var(x, {-1}, biased, keepdim)",
                   [](const T64& a) { return xgrad::var(a, {-1}, false, true); }));
  checks.add(unary("amax", "amax(x, {1, 2})", [](const T64& a) { return xgrad::amax(a, {1, 2}); }));
  checks.add(unary("max", "max(x)", [](const T64& a) { return xgrad::max(a); }));
  checks.add(unary("max_dim", "max(x, -1).values", [](const T64& a) { return xgrad::max(a, -1).first; }));
}
