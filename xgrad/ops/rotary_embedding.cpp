// rotary_embedding as one node with named forward / backward kernels, and the RoPE tables
// (transformers' modeling_rope_utils and LlamaRotaryEmbedding).
//
// x: (..., T, D) is seen as rows of D; each row of x uses one row of cos and sin, found once per
// call (broadcast dims map many rows of x to one row of the tables). Single-threaded: a row costs
// 2D products, far below the matmuls around it.
//
// Bit for bit with torch in float32: y = x * cos + rotate_half(x) * sin rounds each product, then
// the sum, as torch's separate mul and add kernels do. A compiler that contracts a * b + c into
// one fused multiply-add (GCC does by default with -march=native) rounds once and gives other last
// bits, so the kernels and the llama3 blend switch contraction off.
#include <xgrad/ops/ops.hpp>

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/ops/op_scope.hpp>
#include <xgrad/backend/strided.hpp>

#if defined(__clang__)
#define XGRAD_NO_FP_CONTRACT
#define XGRAD_NO_FP_CONTRACT_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define XGRAD_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#define XGRAD_NO_FP_CONTRACT_BODY
#else
#define XGRAD_NO_FP_CONTRACT
#define XGRAD_NO_FP_CONTRACT_BODY
#endif

namespace xgrad {

namespace {

// D (even) and, for each row of x, the offset of the cos / sin row it uses.
struct RopeLayout {
  std::size_t d = 0;
  std::vector<std::size_t> table_row;  // (rows of x): offsets into cos and sin, in elements
};

// The row offsets: cos's leading dims are aligned to the right of x's; a size-1 or missing dim
// repeats its rows (stride 0).
std::vector<std::size_t> table_rows(const Shape& xs, const Shape& cs) {
  const std::size_t n = xs.size() - 1, skip = n - (cs.size() - 1), d = xs.back();
  std::vector<std::size_t> stride(n, 0);
  std::size_t s = d;
  for (std::size_t k = n; k-- > skip;) {
    stride[k] = cs[k - skip] == 1 ? 0 : s;
    s *= cs[k - skip];
  }
  std::vector<std::size_t> rows(detail::numel(xs, 0, n)), index(n, 0);
  std::size_t at = 0;
  for (std::size_t& row : rows) {
    row = at;
    for (std::size_t k = n; k-- > 0;) {  // the next multi-index, last dim fastest
      at += stride[k];
      if (++index[k] < xs[k]) break;
      at -= stride[k] * xs[k];
      index[k] = 0;
    }
  }
  return rows;
}

template <class T>
RopeLayout rope_layout(const char* op, const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin) {
  const Shape xs = x.shape(), cs = cos.shape();
  XGRAD_CHECK(!xs.empty() && xs.back() % 2 == 0, op, ": x must be (..., T, D) with D (the head dim) even, got ", xs);
  XGRAD_CHECK(cs == sin.shape(), op, ": cos and sin must have one shape, got cos ", cs, " and sin ", sin.shape());
  bool broadcasts = !cs.empty() && cs.size() <= xs.size() && cs.back() == xs.back();
  for (std::size_t k = 1; broadcasts && k < cs.size(); ++k)
    broadcasts = cs[cs.size() - 1 - k] == 1 || cs[cs.size() - 1 - k] == xs[xs.size() - 1 - k];
  XGRAD_CHECK(broadcasts, op, ": cos and sin must broadcast to x's shape ", xs, " with its last dim ", xs.back(),
              " ((T, D), (1, T, D) or (B, 1, T, D) for x (B, H, T, D)), got ", cs);
  XGRAD_CHECK(!cos.requires_grad() && !sin.requires_grad(), op,
              ": cos and sin are constants of the model (transformers computes them under no_grad), got ",
              cos.requires_grad() ? "cos" : "sin", " that requires grad: detach it");
  return {xs.back(), table_rows(xs, cs)};
}

// y = x * cos + rotate_half(x) * sin, row by row, h = D/2:
//   y[:h] = x[:h] * c[:h] - x[h:] * s[:h],   y[h:] = x[h:] * c[h:] + x[:h] * s[h:]
// x, y: (rows, D); c, s: the rows L.table_row names. Pair by pair (j, j + h), both read before
// either is written, so y may be x itself (rotary_embedding_): the same expressions, the same bits.
template <class T>
XGRAD_NO_FP_CONTRACT void rotary_forward(const T* x, const T* cos, const T* sin, T* y, const RopeLayout& L) {
  XGRAD_NO_FP_CONTRACT_BODY
  const std::size_t D = L.d, h = D / 2;
  for (std::size_t r = 0; r < L.table_row.size(); ++r) {
    const T *xr = x + r * D, *c = cos + L.table_row[r], *s = sin + L.table_row[r];
    T* yr = y + r * D;
    for (std::size_t j = 0; j < h; ++j) {
      const T a = xr[j], b = xr[j + h];
      yr[j] = a * c[j] - b * s[j];
      yr[j + h] = b * c[j + h] + a * s[j + h];
    }
  }
}

// dx = g * cos + rotate_half^T(g * sin), rotate_half^T(u) = cat(u[h:], -u[:h]):
//   dx[:h] = g[:h] * c[:h] + g[h:] * s[h:],   dx[h:] = g[h:] * c[h:] - g[:h] * s[:h]
template <class T>
XGRAD_NO_FP_CONTRACT void rotary_backward(const T* g, const T* cos, const T* sin, T* dx, const RopeLayout& L) {
  XGRAD_NO_FP_CONTRACT_BODY
  const std::size_t D = L.d, h = D / 2;
  for (std::size_t r = 0; r < L.table_row.size(); ++r) {
    const T *gr = g + r * D, *c = cos + L.table_row[r], *s = sin + L.table_row[r];
    T* dr = dx + r * D;
    for (std::size_t j = 0; j < h; ++j) dr[j] = gr[j] * c[j] + gr[j + h] * s[j + h];
    for (std::size_t j = h; j < D; ++j) dr[j] = gr[j] * c[j] - gr[j - h] * s[j - h];
  }
}

// Under create_graph: the same dx in differentiable ops (linear in g; cos and sin are constants).
template <class T>
std::vector<Tensor<T>> rotary_formula(const BackwardArgs<T>& args) {
  const Tensor<T>& g = args.grad();
  const std::int64_t h = static_cast<std::int64_t>(args.input_shape(0).back() / 2);
  const Tensor<T> u = mul(g, args.input(2));
  const Tensor<T> u_rotated = cat<T>({narrow(u, -1, h, h), neg(narrow(u, -1, 0, h))}, -1);
  return {add(mul(g, args.input(1)), u_rotated), Tensor<T>(), Tensor<T>()};
}

}  // namespace

// https://github.com/huggingface/transformers/blob/main/src/transformers/models/llama/modeling_llama.py
// (rotate_half, apply_rotary_pos_emb)
template <class T>
Tensor<T> rotary_embedding(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin) {
  const OpScope op(OpKind::rotary_embedding);
  auto layout = std::make_shared<const RopeLayout>(rope_layout(op.name(), x, cos, sin));
  Array<T> y = empty_array<T>(x.shape(), op.name());
  rotary_forward(x.value().data(), cos.value().data(), sin.value().data(), y.data(), *layout);
  return op.result<T>(
      std::move(y), {x, cos, sin},
      [layout](Node<T>& node) {
        if (!node.input_needs_grad(0)) return;
        Array<T> dx = empty_array<T>(node.input_shape(0), "rotary_embedding (backward)");
        rotary_backward(node.grad.data(), node.input_value(1).data(), node.input_value(2).data(), dx.data(), *layout);
        node.input(0).accumulate_grad(std::move(dx));
      },
      rotary_formula<T>);
}

// The inference path: x's value rotated in place, no node, no new array.
template <class T>
const Tensor<T>& rotary_embedding_(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin) {
  const OpScope op(OpKind::rotary_embedding);
  XGRAD_CHECK(!(is_grad_enabled() && x.requires_grad()), op.name(),
              "_: x requires grad and grad mode is on: the in-place form records no gradient; use "
              "rotary_embedding, or run under NoGradGuard");
  XGRAD_CHECK(!trace::active(), op.name(),
              "_: a trace is recording (an ONNX export): the in-place form records no op; use rotary_embedding");
  const RopeLayout layout = rope_layout(op.name(), x, cos, sin);
  Array<T>& v = Tensor<T>(x).mutable_value();
  rotary_forward(v.data(), cos.value().data(), sin.value().data(), v.data(), layout);
  return x;
}

// ---- the tables ---------------------------------------------------------------------------------

namespace {

// _compute_llama3_parameters on one frequency, in T, in its order of operations.
template <class T>
XGRAD_NO_FP_CONTRACT T llama3_scaled(T inv_freq, const RopeScaling& s) {
  XGRAD_NO_FP_CONTRACT_BODY
  const auto old_context_len = static_cast<double>(s.original_max_position_embeddings);
  const T low_freq_wavelen = static_cast<T>(old_context_len / s.low_freq_factor);
  const T high_freq_wavelen = static_cast<T>(old_context_len / s.high_freq_factor);
  const T factor = static_cast<T>(s.factor);
  const T wavelen = static_cast<T>(2 * M_PI) / inv_freq;
  const T inv_freq_llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
  if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) return inv_freq_llama;
  const T smooth_factor = (static_cast<T>(old_context_len) / wavelen - static_cast<T>(s.low_freq_factor)) /
                          static_cast<T>(s.high_freq_factor - s.low_freq_factor);
  return (T(1) - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama;
}

void check_scaling(const RopeScaling& s) {
  const char* who = "rope_inv_freq";
  const std::string& t = s.rope_type;
  XGRAD_CHECK(t == "default" || t == "linear" || t == "llama3", who, ": rope_scaling rope_type \"", t,
              "\" is not supported (supported: \"default\", \"linear\", \"llama3\")");
  if (t == "default") return;
  XGRAD_CHECK(s.factor > 0, who, ": rope_scaling factor must be positive for rope_type \"", t, "\", got ", s.factor);
  if (t != "llama3") return;
  XGRAD_CHECK(s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor, who,
              ": rope_scaling (llama3) needs 0 < low_freq_factor < high_freq_factor, got low_freq_factor ",
              s.low_freq_factor, " and high_freq_factor ", s.high_freq_factor);
  XGRAD_CHECK(s.original_max_position_embeddings > 0, who,
              ": rope_scaling (llama3) original_max_position_embeddings must be positive, got ",
              s.original_max_position_embeddings);
}

}  // namespace

// https://github.com/huggingface/transformers/blob/main/src/transformers/modeling_rope_utils.py
template <class T>
Tensor<T> rope_inv_freq(std::int64_t head_dim, double rope_theta, const RopeScaling& scaling,
                        double partial_rotary_factor) {
  XGRAD_CHECK(rope_theta > 0 && std::isfinite(rope_theta), "rope_inv_freq: rope_theta must be positive, got ",
              rope_theta);
  XGRAD_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1,
              "rope_inv_freq: partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  const auto dim = static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  XGRAD_CHECK(head_dim > 0 && dim > 0 && dim % 2 == 0, "rope_inv_freq: the rotated dim int(head_dim ", head_dim,
              " * partial_rotary_factor ", partial_rotary_factor, ") must be positive and even, got ", dim);
  check_scaling(scaling);
  const auto n = static_cast<std::size_t>(dim / 2);
  Array<T> inv = empty_array<T>({n}, "rope_inv_freq");
  for (std::size_t i = 0; i < n; ++i) {
    const T exponent = static_cast<T>(2 * i) / static_cast<T>(dim);  // arange(0, dim, 2).float() / dim
    T f = T(1) / std::pow(static_cast<T>(rope_theta), exponent);
    if (scaling.rope_type == "linear") f = f / static_cast<T>(scaling.factor);
    if (scaling.rope_type == "llama3") f = llama3_scaled(f, scaling);
    inv[i] = f;
  }
  return Tensor<T>(std::move(inv));
}

template <class T>
std::pair<Tensor<T>, Tensor<T>> rope_cos_sin(const Tensor<T>& inv_freq, const IndexArray& positions) {
  XGRAD_CHECK(inv_freq.dim() == 1, "rope_cos_sin: inv_freq must be 1-D, got ", inv_freq.shape());
  const std::size_t n = inv_freq.shape()[0], D = 2 * n;
  Shape shape(positions.shape().begin(), positions.shape().end());
  shape.push_back(D);
  Array<T> cos = empty_array<T>(shape, "rope_cos_sin"), sin = empty_array<T>(shape, "rope_cos_sin");
  const T* f = inv_freq.value().data();
  for (std::size_t p = 0; p < positions.size(); ++p) {
    const T position = static_cast<T>(positions.data()[p]);
    for (std::size_t i = 0; i < n; ++i) {
      const T angle = position * f[i];  // emb = cat(freqs, freqs)
      cos.data()[p * D + i] = cos.data()[p * D + n + i] = std::cos(angle);
      sin.data()[p * D + i] = sin.data()[p * D + n + i] = std::sin(angle);
    }
  }
  return {Tensor<T>(std::move(cos)), Tensor<T>(std::move(sin))};
}

#define XGRAD_INSTANTIATE(T)                                                                            \
  template Tensor<T> rotary_embedding<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&);         \
  template const Tensor<T>& rotary_embedding_<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&); \
  template Tensor<T> rope_inv_freq<T>(std::int64_t, double, const RopeScaling&, double);                \
  template std::pair<Tensor<T>, Tensor<T>> rope_cos_sin<T>(const Tensor<T>&, const IndexArray&);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
