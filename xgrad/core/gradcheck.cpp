#include <xgrad/core/gradcheck.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>

#include <cmath>
#include <iomanip>
#include <limits>
#include <optional>
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

// Perturbs every element of t in place (restoring it) and compares the central difference of
// contracted() = f(...) . u with `analytic` (u^T J for t, of t's shape).
GradcheckInputReport check_elements(Tensor<double>& t, const Array<double>& analytic,
                                    const std::function<double()>& contracted, const GradcheckOptions& options) {
  GradcheckInputReport report;
  report.shape = t.shape();
  double worst_excess = -std::numeric_limits<double>::infinity();
  double* data = t.mutable_value().data();
  for (std::size_t i = 0; i < t.value().size(); ++i) {
    const double saved = data[i];
    data[i] = saved + options.eps;
    const double plus = contracted();
    data[i] = saved - options.eps;
    const double minus = contracted();
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
  return report;
}

Array<double> grad_or_zeros(const Tensor<double>& t) {
  return t.has_grad() ? t.grad() : full_array<double>(t.shape(), 0.0, "gradcheck");
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
  if (y.requires_grad()) y.backward(Tensor<double>(u));

  GradcheckResult result;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!x[k].requires_grad()) continue;
    const Array<double> analytic = grad_or_zeros(x[k]);
    GradcheckInputReport report =
        check_elements(x[k], analytic, [&] { return contract(function(x).value(), u); }, options);
    report.input = k;
    result.passed = result.passed && report.passed;
    result.inputs.push_back(std::move(report));
  }
  return result;
}

GradcheckResult gradcheck_parameters(const std::function<Tensor<double>()>& function, const NamedTensors& tensors,
                                     const GradcheckOptions& options) {
  std::vector<Tensor<double>> checked;
  std::vector<std::optional<Array<double>>> saved_grads;
  for (const auto& [name, t] : tensors) {
    XGRAD_CHECK(t.defined(), "gradcheck_parameters: tensor \"", name, "\" is undefined");
    if (!t.requires_grad()) continue;
    XGRAD_CHECK(t.is_leaf(), "gradcheck_parameters: tensor \"", name, "\" must be a leaf (made by ", t.op(), ")");
    checked.push_back(t);
    saved_grads.push_back(t.has_grad() ? std::optional<Array<double>>(t.grad()) : std::nullopt);
    checked.back().zero_grad(/*set_to_none=*/true);
  }

  // Analytic: one backward with the random upstream gradient u. A tensor listed twice has its
  // gradient read once (the handles alias).
  Tensor<double> y = function();
  XGRAD_CHECK(y.defined(), "gradcheck_parameters: the function returned an undefined tensor");
  Generator gen(options.seed);
  Array<double> u = randn<double>(y.shape(), gen).value();
  if (y.requires_grad()) y.backward(Tensor<double>(u));
  std::vector<Array<double>> analytic;
  for (const auto& t : checked) analytic.push_back(grad_or_zeros(t));
  for (std::size_t k = 0; k < checked.size(); ++k) {
    if (saved_grads[k]) {
      checked[k].set_grad(*saved_grads[k]);
    } else {
      checked[k].zero_grad(/*set_to_none=*/true);
    }
  }

  GradcheckResult result;
  NoGradGuard no_grad;
  std::size_t k = 0;
  for (std::size_t position = 0; position < tensors.size(); ++position) {
    if (!tensors[position].second.requires_grad()) continue;
    GradcheckInputReport report =
        check_elements(checked[k], analytic[k], [&] { return contract(function().value(), u); }, options);
    report.input = position;
    report.name = tensors[position].first;
    result.passed = result.passed && report.passed;
    result.inputs.push_back(std::move(report));
    ++k;
  }
  return result;
}

namespace {

// The second-order check over `tensors` (leaves that require grad, read by `function` by handle)
// and the upstream gradient u; `names` labels the reports (empty: by position).
GradcheckResult second_order_check(const std::function<Tensor<double>()>& function, std::vector<Tensor<double>> tensors,
                                   const std::vector<std::size_t>& positions, const std::vector<std::string>& names,
                                   const GradcheckOptions& options) {
  const GradGuard enabled(true);
  Tensor<double> y = function();
  XGRAD_CHECK(y.defined(), "gradgradcheck: the function returned an undefined tensor");
  Generator gen(options.seed);
  Tensor<double> u(randn<double>(y.shape(), gen).value(), /*requires_grad=*/true);
  // First-order gradients of `function` with respect to `tensors`, seeded with u.
  const auto first_order = [&](bool create_graph) {
    Tensor<double> out = function();
    std::vector<Tensor<double>> g(tensors.size());
    if (out.requires_grad()) g = autograd::grad({out}, tensors, {u}, std::nullopt, create_graph, /*allow_unused=*/true);
    return g;
  };
  std::vector<Tensor<double>> g = first_order(/*create_graph=*/true);
  std::vector<Array<double>> w;  // the contraction weights, one per gradient (of its input's shape)
  for (const auto& t : tensors) w.push_back(randn<double>(t.shape(), gen).value());
  const auto contracted = [&] {
    std::vector<Tensor<double>> gv = first_order(/*create_graph=*/false);
    double s = 0;
    for (std::size_t k = 0; k < gv.size(); ++k)
      if (gv[k].defined()) s += contract(gv[k].value(), w[k]);
    return s;
  };
  // Analytic: w . G differentiated through the create_graph backward.
  std::vector<Tensor<double>> outputs, weights;
  for (std::size_t k = 0; k < g.size(); ++k) {
    if (!g[k].defined() || !g[k].requires_grad()) continue;
    outputs.push_back(g[k]);
    weights.push_back(Tensor<double>(w[k]));
  }
  std::vector<Tensor<double>> wrt = tensors;
  wrt.push_back(u);
  std::vector<Tensor<double>> analytic(wrt.size());
  if (!outputs.empty())
    analytic = autograd::grad(outputs, wrt, weights, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
  GradcheckResult result;
  for (std::size_t k = 0; k < wrt.size(); ++k) {
    const Array<double> a =
        analytic[k].defined() ? analytic[k].value() : full_array<double>(wrt[k].shape(), 0.0, "gradgradcheck");
    GradcheckInputReport report = check_elements(wrt[k], a, contracted, options);
    report.input = k < positions.size() ? positions[k] : positions.size();
    report.name = k < names.size() ? names[k] : "grad_output";
    result.passed = result.passed && report.passed;
    result.inputs.push_back(std::move(report));
  }
  return result;
}

}  // namespace

GradcheckResult gradgradcheck(const GradcheckFunction& function, const std::vector<Tensor<double>>& inputs,
                              const GradcheckOptions& options) {
  std::vector<Tensor<double>> x = copy_inputs(inputs);
  std::vector<Tensor<double>> checked;
  std::vector<std::size_t> positions;
  for (std::size_t k = 0; k < x.size(); ++k) {
    if (!x[k].requires_grad()) continue;
    checked.push_back(x[k]);
    positions.push_back(k);
  }
  XGRAD_CHECK(!checked.empty(), "gradgradcheck: no input requires grad");
  std::vector<std::string> names(checked.size());  // by position
  return second_order_check([&] { return function(x); }, checked, positions, names, options);
}

GradcheckResult gradgradcheck_parameters(const std::function<Tensor<double>()>& function, const NamedTensors& tensors,
                                         const GradcheckOptions& options) {
  std::vector<Tensor<double>> checked;
  std::vector<std::size_t> positions;
  std::vector<std::string> names;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const auto& [name, t] = tensors[k];
    XGRAD_CHECK(t.defined(), "gradgradcheck_parameters: tensor \"", name, "\" is undefined");
    if (!t.requires_grad()) continue;
    XGRAD_CHECK(t.is_leaf(), "gradgradcheck_parameters: tensor \"", name, "\" must be a leaf (made by ", t.op(), ")");
    checked.push_back(t);
    positions.push_back(k);
    names.push_back(name);
  }
  XGRAD_CHECK(!checked.empty(), "gradgradcheck_parameters: no tensor requires grad");
  return second_order_check(function, checked, positions, names, options);
}

std::string GradcheckResult::summary() const {
  std::ostringstream s;
  s << std::setprecision(3);
  for (const auto& r : inputs) {
    if (r.name.empty()) {
      s << "input " << r.input;
    } else {
      s << r.name;
    }
    s << " " << shape_str(r.shape) << ": max abs error " << r.max_abs_error
      << ", max rel error " << r.max_rel_error << ", worst element " << r.worst_element << " (analytic "
      << std::setprecision(10) << r.analytic << ", numeric " << r.numeric << std::setprecision(3) << ") "
      << (r.passed ? "PASS" : "FAIL") << "\n";
  }
  s << (passed ? "PASS" : "FAIL") << "\n";
  return s.str();
}

}  // namespace xgrad
