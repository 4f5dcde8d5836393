// F.dropout (https://pytorch.org/docs/stable/generated/torch.nn.functional.dropout.html).
#include <algorithm>
#include <memory>
#include <mutex>

#include <xgrad/ops/op_scope.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel_loops.hpp>

namespace xgrad {

namespace {

// x, y, m: (n) -> y = x * m, m_i = 1/(1-p) with probability 1-p, else 0, drawn from the generator
// in row-major order (element i is kept when the generator's i-th uniform() >= p); p = 1: m = 0.
// Split: blocks of elements (parallel_blocks, 64K-element grain); a block starting at element i0
// draws from the generator's state i0 draws ahead (Generator::state_ahead, a jump), so the mask is
// the serial draw's at any thread count, and the generator ends n draws on, as after a serial draw.
template <class T>
void dropout_forward(const T* px, T* py, T* pm, std::size_t n, double p, Generator* generator) {
  if (p == 1.0) {
    detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      std::fill(pm + i0, pm + i1, T(0));
      for (std::size_t i = i0; i < i1; ++i) py[i] = px[i] * T(0);  // x * 0: nan and inf give nan, as torch
    });
    return;
  }
  Generator& gen = generator ? *generator : default_generator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  const T scale = T(1.0 / (1.0 - p));
  const auto draw = [&](Generator& g, std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) {
      pm[i] = T(g.uniform() >= p) * scale;  // branch-free: the outcome is random
      py[i] = px[i] * pm[i];
    }
  };
  if (n < detail::kSerialBelow) {
    draw(gen, 0, n);  // one block: straight from the generator
    return;
  }
  detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
    Generator g;
    g.set_state(gen.state_ahead(i0));
    draw(g, i0, i1);
  });
  gen.discard(n);
}

// dy, m -> dx = dy * m (the same mask, scale included); blocks of elements, as the forward.
template <class T>
Array<T> dropout_backward(const Array<T>& dy, const Array<T>& mask) {
  Array<T> gx = empty_array<T>(mask.shape(), "dropout (backward)");
  const T* pg = dy.data();
  const T* pmask = mask.data();
  T* pgx = gx.data();
  detail::parallel_blocks(gx.size(), [&](std::size_t i0, std::size_t i1) {
    for (std::size_t i = i0; i < i1; ++i) pgx[i] = pg[i] * pmask[i];
  });
  return gx;
}

}  // namespace

// Training, 0 < p <= 1: y = x * m with the mask m of dropout_forward. Eval or p = 0: y is x
// itself (the same node, as torch returns its input).
template <class T>
Tensor<T> dropout(const Tensor<T>& a, double p, bool training, Generator* generator) {
  const OpScope op(OpKind::dropout);
  XGRAD_CHECK(p >= 0.0 && p <= 1.0, op.name(), ": probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return a;
  const Array<T>& x = a.value();
  Array<T> mask = empty_array<T>(x.shape(), op.name());
  Array<T> y = empty_array<T>(x.shape(), op.name());
  dropout_forward(x.data(), y.data(), mask.data(), x.size(), p, generator);
  // Kept by both backwards: the kernel and, under create_graph, the formula dx = dy * m with m a
  // constant (no history). Its buffer goes back to the array cache with the closures.
  auto saved = std::make_shared<const detail::RecycledArray<T>>(std::move(mask));
  return op.result<T>(
      std::move(y), {a},
      [saved](Node<T>& out) { out.input(0).accumulate_grad(dropout_backward(out.grad, saved->get())); },
      [saved](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{mul(args.grad(), Tensor<T>(copy_array(saved->get(), "dropout (backward)")))};
      });
}

template Tensor<float> dropout<float>(const Tensor<float>&, double, bool, Generator*);
template Tensor<double> dropout<double>(const Tensor<double>&, double, bool, Generator*);

}  // namespace xgrad
