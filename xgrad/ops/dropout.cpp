// F.dropout (https://pytorch.org/docs/stable/generated/torch.nn.functional.dropout.html).
#include <algorithm>
#include <memory>

#include <xgrad/ops/ops.hpp>
#include <xgrad/core/profiler.hpp>

namespace xgrad {

// Training, 0 < p < 1: y = x * m, m_i = 1/(1-p) with probability 1-p, else 0, drawn from the
// generator in row-major order (element i is kept when uniform() >= p). p = 1: y = 0.
// Eval or p = 0: y is x itself (the same node, as torch returns its input).
template <class T>
Tensor<T> dropout(const Tensor<T>& a, double p, bool training, Generator* generator) {
  XGRAD_PROFILE_OP("dropout");
  XGRAD_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0) return a;

  const Array<T>& x = a.value();
  const std::size_t n = x.size();
  // mask: same shape as x, each entry 0 or 1/(1-p); all zeros when p = 1.
  Array<T> mask = empty_array<T>(x.shape(), "dropout");
  T* pm = mask.data();
  if (p == 1.0) {
    std::fill(pm, pm + n, T(0));
  } else {
    Generator& gen = generator ? *generator : default_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    const T scale = T(1.0 / (1.0 - p));
    for (std::size_t i = 0; i < n; ++i) pm[i] = T(gen.uniform() >= p) * scale;  // branch-free: the outcome is random
  }

  Array<T> y = empty_array<T>(x.shape(), "dropout");
  const T* px = x.data();
  T* py = y.data();
  for (std::size_t i = 0; i < n; ++i) py[i] = px[i] * pm[i];

  // Kept by both backwards: the kernel below and, under create_graph, the formula dx = dy * m with
  // m a constant (no history).
  auto saved = std::make_shared<const Array<T>>(std::move(mask));
  return make_result<T>(
      "dropout", std::move(y), {a},
      [saved](Node<T>& out) {
        // dx = dy * m (the same mask, scale included)
        const Array<T>& mask = *saved;
        Array<T> gx = empty_array<T>(mask.shape(), "dropout (backward)");
        const T* pg = out.grad.data();
        const T* pmask = mask.data();
        T* pgx = gx.data();
        for (std::size_t i = 0, n = gx.size(); i < n; ++i) pgx[i] = pg[i] * pmask[i];
        out.input(0).accumulate_grad(std::move(gx));
      },
      [saved](const BackwardArgs<T>& args) { return std::vector<Tensor<T>>{mul(args.grad(), Tensor<T>(*saved))}; });
}

template Tensor<float> dropout<float>(const Tensor<float>&, double, bool, Generator*);
template Tensor<double> dropout<double>(const Tensor<double>&, double, bool, Generator*);

}  // namespace xgrad
