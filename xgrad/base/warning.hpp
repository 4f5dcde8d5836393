// Warnings, in the spirit of PyTorch's TORCH_WARN and Python's warnings module: where PyTorch
// warns (a loss whose target broadcasts to a different size, initializing a zero-element tensor),
// xgrad calls the warning handler once per call site: by default it prints
//   xgrad warning: <message> (<file>:<line>)
// to stderr; a program may route warnings elsewhere (a log, an exception, a test's list):
//   xgrad::set_warning_handler([](const xgrad::Warning& w) { my_log(w.message); });
//   xgrad::set_warning_handler(nullptr);   // back to stderr
// The handler may be called from any thread (calls are serialized); a handler that throws
// turns the warning into an error at the call site, each time the site is reached (a call that
// throws does not spend its site's warning). A call site warns only once its call is known to go
// through (its arguments checked), so a refused call does not spend the warning either.
#pragma once

#include <functional>
#include <string>

#include <xgrad/base/check.hpp>

namespace xgrad {

struct Warning {
  std::string message;
  const char* file;  // where in xgrad the warning was raised
  int line;
};

using WarningHandler = std::function<void(const Warning&)>;

// Replaces the handler (nullptr: the default, stderr) and returns the previous one.
WarningHandler set_warning_handler(WarningHandler handler);

// Forgets which call sites have warned, so that each warns again once (Python's
// warnings.resetwarnings); for tests.
void reset_warnings();

namespace detail {
// Calls the handler unless the call site file:line has warned already.
void warn_once(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace xgrad

// XGRAD_WARN_ONCE("mse_loss: using a target size (", t.shape(), ") that is different ...");
#define XGRAD_WARN_ONCE(...) ::xgrad::detail::warn_once(__FILE__, __LINE__, ::xgrad::detail::concat(__VA_ARGS__))
