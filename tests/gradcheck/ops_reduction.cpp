// The finite-difference checks of xgrad/ops/reduction.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_reduction) {
  using namespace xgrad::gradcheck_support;
  return {
      unary("sum", "sum(x)", [](const T64& a) { return xgrad::sum(a); }),
      unary("sum_dims", "sum(x, {0, -1}, keepdim)",
            [](const T64& a) {
              return xgrad::sum(a, {0, -1}, true);
            }),
      unary("mean", "mean(x)", [](const T64& a) { return xgrad::mean(a); }),
      unary("mean_dims", "mean(x, {1})", [](const T64& a) { return xgrad::mean(a, {1}); }),
      unary("var", "var(x)", [](const T64& a) { return xgrad::var(a); }),
      unary("var_dims", "var(x, {-1}, biased, keepdim)", [](const T64& a) { return xgrad::var(a, {-1}, false, true); }),
      unary("amax", "amax(x, {1, 2})",
            [](const T64& a) {
              return xgrad::amax(a, {1, 2});
            }),
      unary("max", "max(x)", [](const T64& a) { return xgrad::max(a); }),
      unary("max_dim", "max(x, -1).values", [](const T64& a) { return xgrad::max(a, -1).first; }),
  };
}
