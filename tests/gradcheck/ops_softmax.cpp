// The finite-difference checks of xgrad/ops/softmax.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp).
XGRAD_GRADCHECKS(ops_softmax) {
  using namespace xgrad::gradcheck_support;
  return {
      unary("softmax", "softmax(x, -1)", [](const T64& a) { return xgrad::softmax(a, -1); }),
      unary("log_softmax", "log_softmax(x, 1)", [](const T64& a) { return xgrad::log_softmax(a, 1); }),
      unary("softmax_dim0", "softmax(x, 0)", [](const T64& a) { return xgrad::softmax(a, 0); }),
      unary("log_softmax_last", "log_softmax(x, -1)", [](const T64& a) { return xgrad::log_softmax(a, -1); }),
  };
}
