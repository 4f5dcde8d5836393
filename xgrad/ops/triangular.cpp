// tril and triu: the lower and upper triangles of the last two dims (attention's causal masks),
// the rest zero.
#include <cstdint>

#include <xgrad/backend/strided.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>

namespace xgrad {

namespace {

// tril (lower = true) keeps a[..., i, j] where j - i <= diagonal, triu where j - i >= diagonal;
// the rest is zero, and so is its gradient.
template <class T>
Tensor<T> triangle(const OpScope& scope, const Tensor<T>& a, std::int64_t diagonal, bool lower) {
  const char* op = scope.name();
  const Shape shape = a.shape();
  XGRAD_CHECK(shape.size() >= 2, op, ": input must have at least 2 dimensions (..., rows, cols), got shape ", shape);
  const std::size_t rows = shape[shape.size() - 2], cols = shape.back();
  const std::size_t matrices = detail::numel(shape, 0, shape.size() - 2);
  const auto zero_outside = [=](Array<T>& x) {
    T* p = x.data();
    for (std::size_t b = 0; b < matrices; ++b)
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
          const std::int64_t offset = static_cast<std::int64_t>(j) - static_cast<std::int64_t>(i);
          if (lower ? offset > diagonal : offset < diagonal) p[(b * rows + i) * cols + j] = T(0);
        }
  };
  Array<T> y = copy_array(a.value(), op);
  zero_outside(y);
  return scope.result<T>(
      std::move(y), {a},
      [zero_outside](Node<T>& out) {
        Array<T> g = std::move(out.grad);  // in place: the engine hands the gradient over
        zero_outside(g);
        out.input(0).accumulate_grad(std::move(g));
      },
      [diagonal, lower](const BackwardArgs<T>& args) {  // da = the same triangle of dy
        return std::vector<Tensor<T>>{lower ? xgrad::tril(args.grad(), diagonal) : xgrad::triu(args.grad(), diagonal)};
      });
}

}  // namespace

// ---- tril, triu ---------------------------------------------------------------------------------

template <class T>
Tensor<T> tril(const Tensor<T>& a, std::int64_t diagonal) {
  const OpScope op(OpKind::tril);
  XGRAD_OP_NOTE(op, {"diagonal", diagonal});
  return triangle(op, a, diagonal, /*lower=*/true);
}

template <class T>
Tensor<T> triu(const Tensor<T>& a, std::int64_t diagonal) {
  const OpScope op(OpKind::triu);
  XGRAD_OP_NOTE(op, {"diagonal", diagonal});
  return triangle(op, a, diagonal, /*lower=*/false);
}

#define XGRAD_INSTANTIATE(T)                                  \
  template Tensor<T> tril<T>(const Tensor<T>&, std::int64_t); \
  template Tensor<T> triu<T>(const Tensor<T>&, std::int64_t);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
