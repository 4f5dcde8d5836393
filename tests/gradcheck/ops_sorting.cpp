// The finite-difference checks of xgrad/ops/sorting.cpp (the gradcheck registry: registry.hpp).
#include "registry.hpp"

#include <algorithm>
#include <cstdint>

#include <xgrad/ops/ops.hpp>

// Finite-difference checks of its ops (see registry.hpp). Random normal
// inputs have no ties, so no finite-difference step reorders topk's or sort's values.
XGRAD_GRADCHECKS(ops_sorting) {
  using namespace xgrad::gradcheck_support;
  // k = 2, or the size of the dim when smaller (the tool's sizes are flags).
  return {
      unary("topk", "topk(x, 2, -1).values",
            [](const T64& a) { return xgrad::topk(a, std::min<std::int64_t>(2, a.size(-1)), -1).first; }),
      unary("topk_smallest", "topk(x, 2, 1, largest=false, sorted=false).values",
            [](const T64& a) { return xgrad::topk(a, std::min<std::int64_t>(2, a.size(1)), 1, false, false).first; }),
      unary("sort", "sort(x, 1, descending).values", [](const T64& a) { return xgrad::sort(a, 1, true).first; }),
  };
}
