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
// copied (as gradcheck does); params are perturbed in place and restored.
inline GradcheckResult module_gradcheck(const GradcheckFunction& f, const Inputs& inputs, const Inputs& params,
                                        const GradcheckOptions& options = {}) {
  Inputs x;
  for (const auto& t : inputs) x.emplace_back(Array<double>(t.value()), t.requires_grad());
  for (T64 p : params) p.zero_grad(/*set_to_none=*/true);

  T64 y = f(x);
  Generator gen(options.seed);
  Array<double> u = randn<double>(y.shape(), gen).value();
  y.backward(u);

  std::vector<T64> checked = x;
  checked.insert(checked.end(), params.begin(), params.end());
  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < checked.size(); ++k) {
    T64 t = checked[k];
    if (!t.requires_grad()) continue;
    GradcheckInputReport report;
    report.input = k;
    report.shape = t.shape();
    const Array<double> analytic = t.has_grad() ? t.grad() : Array<double>(xt::zeros<double>(t.shape()));
    double worst = -std::numeric_limits<double>::infinity();
    double* data = t.mutable_value().data();
    for (std::size_t i = 0; i < t.numel(); ++i) {
      const double saved = data[i];
      auto contract = [&] {
        const Array<double> v = f(x).value();
        double s = 0;
        for (std::size_t j = 0; j < v.size(); ++j) s += v.data()[j] * u.data()[j];
        return s;
      };
      data[i] = saved + options.eps;
      const double plus = contract();
      data[i] = saved - options.eps;
      const double minus = contract();
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double a = analytic.data()[i];
      const double err = std::abs(a - numeric);
      const double excess = err - options.atol - options.rtol * std::abs(numeric);
      report.max_abs_error = std::max(report.max_abs_error, err);
      report.max_rel_error = std::max(report.max_rel_error, err / std::max(std::abs(numeric), options.atol));
      if (!(excess <= 0)) report.passed = false;
      if (!(excess <= worst)) {
        worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
        report.worst_element = i;
        report.analytic = a;
        report.numeric = numeric;
      }
    }
    result.passed = result.passed && report.passed;
    result.inputs.push_back(report);
  }
  return result;
}

// Expects module_gradcheck to pass with every parameter checked (inputs numbered first, then
// params in order).
inline void expect_module_gradcheck(const GradcheckFunction& f, const Inputs& inputs, const Inputs& params,
                                    const GradcheckOptions& options = {}) {
  ASSERT_FALSE(params.empty()) << "no parameters given";
  GradcheckResult r = module_gradcheck(f, inputs, params, options);
  EXPECT_TRUE(r.passed) << r.summary();
  std::size_t param_reports = 0;
  for (const auto& report : r.inputs) param_reports += report.input >= inputs.size();
  EXPECT_EQ(param_reports, params.size()) << "some parameters do not require grad: not checked";
}

}  // namespace xgrad::testing
