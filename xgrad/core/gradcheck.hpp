// Finite-difference gradient checking, as torch.autograd.gradcheck: double precision, central
// differences, eps 1e-6, atol 1e-5, rtol 1e-3.
//
// The function's output y is contracted with a fixed random upstream gradient u (seeded), so
// the analytic vector-Jacobian product u^T J, from one backward pass, is compared with
// (f(x + eps e_i) - f(x - eps e_i)) . u / (2 eps) for every element i of every input that
// requires grad. An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
//
//   auto result = xgrad::gradcheck(
//       [](const std::vector<xgrad::Tensor<double>>& in) { return xgrad::tanh(in[0]); },
//       {xgrad::randn<double>({3, 4}, true)});
//   if (!result.passed) std::cerr << result.summary();
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/factories.hpp>

namespace xgrad {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  std::uint64_t seed = 0;  // of the random upstream gradient

  GradcheckOptions& set_eps(double v) { eps = v; return *this; }
  GradcheckOptions& set_atol(double v) { atol = v; return *this; }
  GradcheckOptions& set_rtol(double v) { rtol = v; return *this; }
};

// One input's verdict. Elements are flat (row-major) indices.
struct GradcheckInputReport {
  std::size_t input = 0;       // position in the inputs vector
  std::string name;            // gradcheck_parameters: the tensor's name; gradcheck: empty
  Shape shape;
  double max_abs_error = 0;    // max |analytic - numeric|
  double max_rel_error = 0;    // max |analytic - numeric| / max(|numeric|, atol)
  std::size_t worst_element = 0;  // where (abs - atol - rtol |numeric|) is largest
  double analytic = 0;         // at the worst element
  double numeric = 0;
  bool passed = true;
};

struct GradcheckResult {
  bool passed = true;
  std::vector<GradcheckInputReport> inputs;  // inputs that require grad only
  // A readable table, one line per checked input.
  std::string summary() const;
};

using GradcheckFunction = std::function<Tensor<double>(const std::vector<Tensor<double>>&)>;

// Inputs that do not require grad are passed through unchecked. The function must be
// deterministic (re-seed any generator it uses inside it). The inputs are not modified.
GradcheckResult gradcheck(const GradcheckFunction& function, const std::vector<Tensor<double>>& inputs,
                          const GradcheckOptions& options = {});

// The same check for tensors the function reads by handle rather than as arguments: a module's
// parameters (`module->named_parameters()`), or inputs the function captured. Each is perturbed
// in place, one element at a time, and restored. The function must be deterministic (re-seed
// any generator it uses, e.g. `manual_seed(s)` first thing for dropout). Tensors that do not
// require grad are skipped; the others must be leaves. Their gradients are left as they were.
//
//   auto r = xgrad::gradcheck_parameters(
//       [&] { return xgrad::mse_loss(model->forward(x), target); }, model->named_parameters());
using NamedTensors = std::vector<std::pair<std::string, Tensor<double>>>;
GradcheckResult gradcheck_parameters(const std::function<Tensor<double>()>& function, const NamedTensors& tensors,
                                     const GradcheckOptions& options = {});

// torch.autograd.gradgradcheck: the second derivatives against finite differences of the first.
// The function's first-order gradients G(x, u) = u^T J (a backward with create_graph, u a random
// upstream gradient that is itself an input) are contracted with fixed random weights w, and the
// analytic derivative of w . G with respect to every input and to u (a backward through
// the create_graph backward) is compared with central differences of w . G, element by element, at
// the same tolerances as gradcheck. The report lists the inputs that require grad, then u (named
// "grad_output"). An op without a differentiable backward fails with its name in the error.
//
//   auto result = xgrad::gradgradcheck(
//       [](const std::vector<xgrad::Tensor<double>>& in) { return xgrad::tanh(in[0]); },
//       {xgrad::randn<double>({3, 4}, true)});
GradcheckResult gradgradcheck(const GradcheckFunction& function, const std::vector<Tensor<double>>& inputs,
                              const GradcheckOptions& options = {});
// The same over tensors the function reads by handle (gradcheck_parameters' form).
GradcheckResult gradgradcheck_parameters(const std::function<Tensor<double>()>& function, const NamedTensors& tensors,
                                         const GradcheckOptions& options = {});

}  // namespace xgrad
