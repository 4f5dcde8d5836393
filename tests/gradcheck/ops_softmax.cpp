// The finite-difference checks of xgrad/ops/softmax.cpp (the gradcheck registry: registry.hpp).
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
XGRAD_GRADCHECKS(ops_softmax) {
  using namespace xgrad::gradcheck_support;
  checks.add(unary("softmax", "softmax(x, -1)", [](const T64& a) { return xgrad::softmax(a, -1); }));
  checks.add(unary("log_softmax", "log_softmax(x, 1)", [](const T64& a) { return xgrad::log_softmax(a, 1); }));
  checks.add(unary("softmax_dim0", "softmax(x, 0)", [](const T64& a) { return xgrad::softmax(a, 0); }));
  checks.add(unary("log_softmax_last", "log_softmax(x, -1)", [](const T64& a) { return xgrad::log_softmax(a, -1); }));
}
