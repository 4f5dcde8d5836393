// Tensor::backward takes LibTorch's arguments only: (const Tensor<T>& gradient = {},
// std::optional<bool> retain_graph = {}, bool create_graph = false). An Array seed and a bool
// meant as retain_graph stop at its one static_assert (tests/CMakeLists.txt builds this file once
// per XGRAD_CASE and expects the message). backward(bool) and backward(const Array<T>&, bool) were
// removed: backward({}, true) chose the Array form and seeded zeros, so every gradient was 0.
#include <xgrad/core/tensor.hpp>

void refused(const xgrad::Tensor<double>& loss, const xgrad::Array<double>& seed) {
#if XGRAD_CASE == 1  // an Array seed: wrap it, Tensor<double>(seed)
  loss.backward(seed);
#elif XGRAD_CASE == 2  // retain_graph alone: backward({}, true)
  loss.backward(true);
#elif XGRAD_CASE == 3  // an Array seed and retain_graph
  loss.backward(seed, true);
#endif
  (void)loss;
  (void)seed;
}
