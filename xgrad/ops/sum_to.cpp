// sum_to (sum_to.hpp): a broadcast gradient summed back to its operand's shape, split by output
// over the thread pool so that the sums are the serial walk's at any thread count.
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <xgrad/backend/array.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/base/check.hpp>
#include <xgrad/ops/sum_to.hpp>

namespace xgrad {

namespace {
template <class T>
bool has_shape(const Array<T>& a, const Shape& shape) {
  return a.dimension() == shape.size() && std::equal(shape.begin(), shape.end(), a.shape().begin());
}
}  // namespace

template <class T>
Array<T> sum_to(Array<T>&& grad, const Shape& shape) {
  if (has_shape(grad, shape)) return std::move(grad);
  return sum_to(static_cast<const Array<T>&>(grad), shape);
}

template <class T>
Array<T> sum_to(const Array<T>& grad, const Shape& shape) {
  const std::size_t gd = grad.dimension();
  const std::size_t sd = shape.size();
  if (has_shape(grad, shape)) return copy_array(grad, "sum_to");  // from the array cache, on the pool
  XGRAD_CHECK(gd >= sd, "sum_to: cannot sum a gradient of shape ", grad.shape(), " to shape ", shape);
  // Output stride of each grad dim: 0 where the target broadcast (absent or 1), else the
  // target's row-major stride.
  std::vector<std::size_t> out_stride(gd, 0);
  std::size_t stride = 1;
  for (std::size_t k = 0; k < sd; ++k) {
    const std::size_t d = sd - 1 - k;  // target dim
    const std::size_t g = gd - 1 - k;  // grad dim
    const std::size_t gs = grad.shape()[g];
    XGRAD_CHECK(shape[d] == gs || shape[d] == 1, "sum_to: cannot sum a gradient of shape ", grad.shape(), " to shape ",
                shape);
    if (shape[d] == gs) out_stride[g] = stride;
    stride *= shape[d];
  }
  Array<T> out = full_array<T>(shape, T(0), "sum_to (a broadcast operand's gradient)");
  T* dst = out.data();
  const T* src = grad.data();
  // Split by output (rows x column blocks of the kept dims), each output summing its elements in
  // row-major order as the serial walk: the same result at any thread count (parallel_loops.hpp).
  detail::parallel_reduce_visit(shape_of(grad), out_stride, [&](std::size_t i, std::size_t o) { dst[o] += src[i]; });
  return out;
}

#define XGRAD_INSTANTIATE(T)                                  \
  template Array<T> sum_to<T>(const Array<T>&, const Shape&); \
  template Array<T> sum_to<T>(Array<T>&&, const Shape&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
