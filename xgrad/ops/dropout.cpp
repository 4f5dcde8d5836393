// F.dropout (https://pytorch.org/docs/stable/generated/torch.nn.functional.dropout.html).
#include <algorithm>
#include <memory>

#include <xgrad/ops/ops.hpp>
#include <xgrad/backend/parallel_loops.hpp>
#include <xgrad/core/profiler.hpp>

namespace xgrad {

// Training, 0 < p < 1: y = x * m, m_i = 1/(1-p) with probability 1-p, else 0, drawn from the
// generator in row-major order (element i is kept when the generator's i-th uniform() >= p).
// p = 1: y = 0. Eval or p = 0: y is x itself (the same node, as torch returns its input).
// Split: blocks of elements (parallel_blocks, 64K-element grain); a block starting at element i0
// draws from the generator's state i0 draws ahead (Generator::state_ahead, a jump), so the mask is
// the serial draw's at any thread count, and the generator ends n draws on, as after a serial draw.
template <class T>
Tensor<T> dropout(const Tensor<T>& a, double p, bool training, Generator* generator) {
  XGRAD_PROFILE_OP("dropout");
  XGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return a;

  const Array<T>& x = a.value();
  const std::size_t n = x.size();
  // mask: same shape as x, each entry 0 or 1/(1-p); all zeros when p = 1.  y = x * mask.
  Array<T> mask = empty_array<T>(x.shape(), "dropout");
  Array<T> y = empty_array<T>(x.shape(), "dropout");
  T* pm = mask.data();
  const T* px = x.data();
  T* py = y.data();
  if (p == 1.0) {
    detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
      std::fill(pm + i0, pm + i1, T(0));
      for (std::size_t i = i0; i < i1; ++i) py[i] = px[i] * T(0);  // x * 0: nan and inf give nan, as torch
    });
  } else {
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
    } else {
      detail::parallel_blocks(n, [&](std::size_t i0, std::size_t i1) {
        Generator g;
        g.set_state(gen.state_ahead(i0));
        draw(g, i0, i1);
      });
      gen.discard(n);
    }
  }

  // Kept by both backwards: the kernel below and, under create_graph, the formula dx = dy * m with
  // m a constant (no history). Its buffer goes back to the array cache with the closures.
  auto saved = std::make_shared<const detail::RecycledArray<T>>(std::move(mask));
  return make_result<T>(
      "dropout", std::move(y), {a},
      [saved](Node<T>& out) {
        // dx = dy * m (the same mask, scale included); blocks of elements, as the forward
        const Array<T>& mask = saved->get();
        Array<T> gx = empty_array<T>(mask.shape(), "dropout (backward)");
        const T* pg = out.grad.data();
        const T* pmask = mask.data();
        T* pgx = gx.data();
        detail::parallel_blocks(gx.size(), [&](std::size_t i0, std::size_t i1) {
          for (std::size_t i = i0; i < i1; ++i) pgx[i] = pg[i] * pmask[i];
        });
        out.input(0).accumulate_grad(std::move(gx));
      },
      [saved](const BackwardArgs<T>& args) {
        return std::vector<Tensor<T>>{mul(args.grad(), Tensor<T>(copy_array(saved->get(), "dropout (backward)")))};
      });
}

template Tensor<float> dropout<float>(const Tensor<float>&, double, bool, Generator*);
template Tensor<double> dropout<double>(const Tensor<double>&, double, bool, Generator*);

}  // namespace xgrad
