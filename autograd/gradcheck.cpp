#include "autograd/gradcheck.hpp"

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace xgrad {

namespace {

// Fresh leaves holding copies of the inputs' values, so the caller's tensors are untouched.
std::vector<Tensor<double>> copy_inputs(const std::vector<Tensor<double>>& inputs) {
  std::vector<Tensor<double>> copies;
  copies.reserve(inputs.size());
  for (const auto& t : inputs) copies.emplace_back(Array<double>(t.value()), t.requires_grad());
  return copies;
}

double contract(const Array<double>& y, const Array<double>& u) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += y.data()[i] * u.data()[i];
  return s;
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFunction& function, const std::vector<Tensor<double>>& inputs,
                          const GradcheckOptions& options) {
  // Analytic: one backward with the random upstream gradient u.
  std::vector<Tensor<double>> x = copy_inputs(inputs);
  Tensor<double> y = function(x);
  XGRAD_CHECK(y.defined(), "gradcheck: the function returned an undefined tensor");
  Generator gen(options.seed);
  Array<double> u = randn<double>(y.shape(), gen).value();
  if (y.requires_grad()) y.backward(u);

  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!x[k].requires_grad()) continue;
    GradcheckInputReport report;
    report.input = k;
    report.shape = x[k].shape();
    const std::size_t n = x[k].numel();
    Array<double> analytic = x[k].has_grad() ? x[k].grad() : Array<double>(xt::zeros<double>(x[k].shape()));
    double worst_excess = -std::numeric_limits<double>::infinity();
    double* data = x[k].mutable_value().data();
    for (std::size_t i = 0; i < n; ++i) {
      const double saved = data[i];
      data[i] = saved + options.eps;
      const double plus = contract(function(x).value(), u);
      data[i] = saved - options.eps;
      const double minus = contract(function(x).value(), u);
      data[i] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double a = analytic.data()[i];
      const double err = std::abs(a - numeric);
      const double rel = err / std::max(std::abs(numeric), options.atol);
      const double excess = err - options.atol - options.rtol * std::abs(numeric);
      report.max_abs_error = std::max(report.max_abs_error, err);
      report.max_rel_error = std::max(report.max_rel_error, rel);
      if (!(excess <= 0)) report.passed = false;  // NaN fails too
      if (excess > worst_excess || std::isnan(excess)) {
        worst_excess = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
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

std::string GradcheckResult::summary() const {
  std::ostringstream s;
  s << std::setprecision(3);
  for (const auto& r : inputs) {
    s << "input " << r.input << " " << shape_str(r.shape) << ": max abs error " << r.max_abs_error
      << ", max rel error " << r.max_rel_error << ", worst element " << r.worst_element << " (analytic "
      << std::setprecision(10) << r.analytic << ", numeric " << r.numeric << std::setprecision(3) << ") "
      << (r.passed ? "PASS" : "FAIL") << "\n";
  }
  s << (passed ? "PASS" : "FAIL") << "\n";
  return s.str();
}

}  // namespace xgrad
