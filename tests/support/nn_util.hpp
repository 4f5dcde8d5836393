// Helpers for the nn suites: a finite-difference check over a module's parameters as well as
// its inputs.
//
// xgrad::gradcheck copies its inputs into fresh leaves, so a module's own parameters cannot be
// among them. module_gradcheck checks the same way (central differences, the same tolerances,
// a seeded random upstream gradient u) but perturbs the parameters in place, one element at a
// time, and compares with the gradients backward() accumulated into them.
#pragma once

#include <functional>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace xgrad::testing {

// f(inputs) -> y, where y may depend on `params` (tensors f reads from a module). Inputs are
// copied (as gradcheck does); params are perturbed in place and restored. Reports come in order,
// named "input.k" then "param.k" (those that require grad).
inline GradcheckResult module_gradcheck(const GradcheckFunction& f, const Inputs& inputs, const Inputs& params,
                                        const GradcheckOptions& options = {}) {
  Inputs x;
  for (const auto& t : inputs) x.emplace_back(Array<double>(t.value()), t.requires_grad());
  NamedTensors named;
  for (std::size_t k = 0; k < x.size(); ++k) named.emplace_back("input." + std::to_string(k), x[k]);
  for (std::size_t k = 0; k < params.size(); ++k) named.emplace_back("param." + std::to_string(k), params[k]);
  return gradcheck_parameters([&] { return f(x); }, named, options);
}

// The (l, l) causal bool mask: true (masked) above the diagonal, as
// nn.Transformer.generate_square_subsequent_mask is -inf there.
inline BoolArray causal(std::size_t l) {
  BoolArray c = BoolArray::from_shape({l, l});
  for (std::size_t i = 0; i < l; ++i)
    for (std::size_t j = 0; j < l; ++j) c(i, j) = j > i;
  return c;
}

// Expects module_gradcheck to pass with every parameter checked.
inline void expect_module_gradcheck(const GradcheckFunction& f, const Inputs& inputs, const Inputs& params,
                                    const GradcheckOptions& options = {}) {
  ASSERT_FALSE(params.empty()) << "no parameters given";
  GradcheckResult r = module_gradcheck(f, inputs, params, options);
  EXPECT_TRUE(r.passed) << r.summary();
  std::size_t param_reports = 0;
  for (const auto& report : r.inputs) param_reports += report.name.rfind("param.", 0) == 0;
  EXPECT_EQ(param_reports, params.size()) << "some parameters do not require grad: not checked";
}

}  // namespace xgrad::testing
