// Tensor::register_hook with a callable of no accepted form must stop at its one static_assert
// (tests/CMakeLists.txt builds this file once per XGRAD_CASE and expects the message, and no
// "invoke_result" or "no matching" pages); it used to give 85 lines of template errors.
#include <string>

#include <xgrad/core/tensor.hpp>

void refused(xgrad::Tensor<double>& x) {
#if XGRAD_CASE == 1  // takes neither a Tensor nor an Array
  x.register_hook([](int) {});
#elif XGRAD_CASE == 2  // takes an Array, returns something else
  x.register_hook([](const xgrad::Array<double>&) { return std::string("no"); });
#elif XGRAD_CASE == 3  // takes a Tensor, returns something else
  x.register_hook([](xgrad::Tensor<double> g) { return g.item(); });
#endif
}
