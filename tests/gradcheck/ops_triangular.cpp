// The finite-difference checks of xgrad/ops/triangular.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_triangular) {
  using namespace xgrad::gradcheck_support;
  return {
      unary("tril", "tril(x, -1) over (L, D)", [](const T64& a) { return xgrad::tril(a, -1); }),
      unary("triu", "triu(x, 1) over (L, D)", [](const T64& a) { return xgrad::triu(a, 1); }),
  };
}
