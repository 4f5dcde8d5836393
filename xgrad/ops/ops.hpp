// Every differentiable op, as free functions over Tensor<T> (T = float or double), with
// PyTorch's names and argument order. Each op lives in the .cpp named in its section, with its
// backward right below its forward.
//
// Binary ops broadcast NumPy-style; the gradient of each operand is summed back to its shape.
// Dims may be negative (counting from the end). Bad shapes or arguments throw
// std::invalid_argument naming the op, what was expected and what came.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <xgrad/core/tensor.hpp>
#include <xgrad/base/random.hpp>
#include <xgrad/core/factories.hpp>
#include <xgrad/core/grad_mode.hpp>
#include <xgrad/core/graph.hpp>

namespace xgrad {

namespace detail {
// Keeps a scalar argument out of template deduction, so that `t * 2.0` works for Tensor<float>.
template <class T>
struct identity { using type = T; };
}  // namespace detail
template <class T>
using Scalar = typename detail::identity<T>::type;

// ---- elementwise.cpp: arithmetic and pointwise functions --------------------------------------

template <class T> Tensor<T> add(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> sub(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> mul(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> div(const Tensor<T>& a, const Tensor<T>& b);
template <class T> Tensor<T> add(const Tensor<T>& a, Scalar<T> b);
template <class T> Tensor<T> mul(const Tensor<T>& a, Scalar<T> b);
template <class T> Tensor<T> rsub(const Tensor<T>& a, Scalar<T> b);  // b - a
template <class T> Tensor<T> rdiv(const Tensor<T>& a, Scalar<T> b);  // b / a
template <class T> Tensor<T> neg(const Tensor<T>& a);
template <class T> Tensor<T> pow(const Tensor<T>& a, Scalar<T> exponent);
template <class T> Tensor<T> exp(const Tensor<T>& a);
template <class T> Tensor<T> log(const Tensor<T>& a);
template <class T> Tensor<T> sqrt(const Tensor<T>& a);
template <class T> Tensor<T> abs(const Tensor<T>& a);  // gradient sign(a), 0 at 0
template <class T> Tensor<T> tanh(const Tensor<T>& a);
template <class T> Tensor<T> sigmoid(const Tensor<T>& a);
// F.silu: x * sigmoid(x) (the swish of Ramachandran et al.).
template <class T> Tensor<T> silu(const Tensor<T>& a);
template <class T> Tensor<T> relu(const Tensor<T>& a);  // gradient 0 at 0
// approximate: "none" (erf form, default) or "tanh".
template <class T> Tensor<T> gelu(const Tensor<T>& a, const std::string& approximate = "none");
// torch.clamp: either bound may be absent; the gradient passes where min <= a <= max.
template <class T>
Tensor<T> clamp(const Tensor<T>& a, std::optional<Scalar<T>> min, std::optional<Scalar<T>> max);

template <class T> Tensor<T> operator+(const Tensor<T>& a, const Tensor<T>& b) { return add(a, b); }
template <class T> Tensor<T> operator-(const Tensor<T>& a, const Tensor<T>& b) { return sub(a, b); }
template <class T> Tensor<T> operator*(const Tensor<T>& a, const Tensor<T>& b) { return mul(a, b); }
template <class T> Tensor<T> operator/(const Tensor<T>& a, const Tensor<T>& b) { return div(a, b); }
template <class T> Tensor<T> operator+(const Tensor<T>& a, Scalar<T> b) { return add(a, b); }
template <class T> Tensor<T> operator+(Scalar<T> a, const Tensor<T>& b) { return add(b, a); }
template <class T> Tensor<T> operator-(const Tensor<T>& a, Scalar<T> b) { return add(a, -b); }
template <class T> Tensor<T> operator-(Scalar<T> a, const Tensor<T>& b) { return rsub(b, a); }
template <class T> Tensor<T> operator*(const Tensor<T>& a, Scalar<T> b) { return mul(a, b); }
template <class T> Tensor<T> operator*(Scalar<T> a, const Tensor<T>& b) { return mul(b, a); }
template <class T> Tensor<T> operator/(const Tensor<T>& a, Scalar<T> b) { return mul(a, Scalar<T>(1) / b); }
template <class T> Tensor<T> operator/(Scalar<T> a, const Tensor<T>& b) { return rdiv(b, a); }
template <class T> Tensor<T> operator-(const Tensor<T>& a) { return neg(a); }

// ---- reduction.cpp: sum, mean, var, max ---------------------------------------------------------

// Over all elements: a 0-d (scalar) tensor.
template <class T> Tensor<T> sum(const Tensor<T>& a);
template <class T> Tensor<T> mean(const Tensor<T>& a);
// Over the given dims (a non-empty list, each once; may be negative); keepdim keeps them with size 1.
template <class T> Tensor<T> sum(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
template <class T> Tensor<T> mean(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
// Sums a (broadcast) tensor back to `shape`, the reverse of broadcasting (torch's sum_to_size), as
// differentiable ops: what a broadcasting op's differentiable backward (create_graph) calls.
template <class T>
Tensor<T> sum_to(const Tensor<T>& a, const Shape& shape);
// unbiased=true divides by n - 1 (torch.var's default), else by n.
template <class T> Tensor<T> var(const Tensor<T>& a, bool unbiased = true);
template <class T>
Tensor<T> var(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool unbiased = true, bool keepdim = false);
// Without this overload, var(a, {1}) would convert {1} to bool and mean var(a, unbiased=true).
template <class T>
Tensor<T> var(const Tensor<T>& a, std::initializer_list<std::int64_t> dims, bool unbiased = true, bool keepdim = false) {
  return var(a, std::vector<std::int64_t>(dims), unbiased, keepdim);
}
// torch.amax: the maximum over dims; the gradient is shared evenly among tied maxima.
template <class T> Tensor<T> amax(const Tensor<T>& a, const std::vector<std::int64_t>& dims, bool keepdim = false);
// torch.max(a): the maximum of all elements (gradient shared evenly among ties).
template <class T> Tensor<T> max(const Tensor<T>& a);
// torch.max(a, dim, keepdim): values and the index of the first maximum; the gradient goes to
// that index.
template <class T>
std::pair<Tensor<T>, IndexArray> max(const Tensor<T>& a, std::int64_t dim, bool keepdim = false);

// ---- shape.cpp: views and copies ------------------------------------------------------------
// Tensors are always stored contiguous, row-major; ops that are views in PyTorch copy here.

template <class T> Tensor<T> transpose(const Tensor<T>& a, std::int64_t dim0, std::int64_t dim1);
template <class T> Tensor<T> permute(const Tensor<T>& a, const std::vector<std::int64_t>& dims);
// One entry may be -1 (inferred).
template <class T> Tensor<T> reshape(const Tensor<T>& a, const std::vector<std::int64_t>& shape);
template <class T> Tensor<T> view(const Tensor<T>& a, const std::vector<std::int64_t>& shape) { return reshape(a, shape); }
template <class T> Tensor<T> flatten(const Tensor<T>& a, std::int64_t start_dim = 0, std::int64_t end_dim = -1);
template <class T> Tensor<T> unsqueeze(const Tensor<T>& a, std::int64_t dim);
template <class T> Tensor<T> squeeze(const Tensor<T>& a);           // every size-1 dim
template <class T> Tensor<T> squeeze(const Tensor<T>& a, std::int64_t dim);  // that dim if its size is 1
// Broadcasts size-1 dims (and new leading dims) to `sizes`; -1 keeps a size.
template <class T> Tensor<T> expand(const Tensor<T>& a, const std::vector<std::int64_t>& sizes);
// Already contiguous: returns a itself (as torch does for a contiguous tensor).
template <class T> Tensor<T> contiguous(const Tensor<T>& a) { return a; }
template <class T> Tensor<T> cat(const std::vector<Tensor<T>>& tensors, std::int64_t dim = 0);
template <class T> Tensor<T> stack(const std::vector<Tensor<T>>& tensors, std::int64_t dim = 0);
template <class T> Tensor<T> narrow(const Tensor<T>& a, std::int64_t dim, std::int64_t start, std::int64_t length);
// a[..., start:end:step, ...] along dim; negative start/end count from the end, clamped as Python.
template <class T>
Tensor<T> slice(const Tensor<T>& a, std::int64_t dim, std::int64_t start, std::int64_t end, std::int64_t step = 1);

// ---- indexing.cpp: index_select, embedding, masked_fill, where ---------------------------------

// index: 1-D; gradient scatters and adds for repeated indices.
template <class T> Tensor<T> index_select(const Tensor<T>& a, std::int64_t dim, const IndexArray& index);
// F.embedding: weight (num_embeddings, D), indices of any shape -> (*indices.shape, D). Rows
// equal to padding_idx get no gradient. Gradients of repeated indices add up.
template <class T>
Tensor<T> embedding(const IndexArray& indices, const Tensor<T>& weight,
                    std::optional<std::int64_t> padding_idx = std::nullopt);
// mask broadcasts to a's shape; true positions are set to value (and get no gradient).
template <class T> Tensor<T> masked_fill(const Tensor<T>& a, const BoolArray& mask, Scalar<T> value);
// condition ? a : b, all three broadcast together. Call it as xgrad::where: with an xt::xarray
// condition, an unqualified call also finds xt::where by ADL and fails to compile.
template <class T> Tensor<T> where(const BoolArray& condition, const Tensor<T>& a, const Tensor<T>& b);

// ---- matmul.cpp: products (gemm.hpp) ---------------------------------------------------------

// torch.matmul for operands of at least 1 dim: 1-D vectors are promoted and the added dim
// removed; N-D operands broadcast their batch dims and multiply their last two. Transposes are
// passed to gemm as flags, never materialized.
template <class T> Tensor<T> matmul(const Tensor<T>& a, const Tensor<T>& b);
// F.linear: x (*, in), weight (out, in), bias (out) or undefined -> (*, out); one node.
template <class T> Tensor<T> linear(const Tensor<T>& x, const Tensor<T>& weight, const Tensor<T>& bias = {});

// ---- softmax.cpp ------------------------------------------------------------------------------

// Max-subtracted; one node each.
template <class T> Tensor<T> softmax(const Tensor<T>& a, std::int64_t dim);
template <class T> Tensor<T> log_softmax(const Tensor<T>& a, std::int64_t dim);

// ---- layer_norm.cpp ---------------------------------------------------------------------------

// F.layer_norm over the trailing normalized_shape dims ({x.size(-1)}, x.sizes() or a Shape; a
// negative size throws); weight and bias (of that shape) may be undefined. Biased variance, eps
// inside the square root. One fused node whose statistics stay accurate under a large common offset.
template <class T>
Tensor<T> layer_norm(const Tensor<T>& x, const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                     const Tensor<T>& bias = {}, double eps = 1e-5);

// The residual add fused into the LayerNorm after it (llm.c's fused_residual_forward/backward,
// apex's FusedAddLayerNorm), for the transformer layers' residual lines:
//   add_layer_norm(x, r, ...)          == layer_norm(x + r, ...)             (post-norm)
//   add_layer_norm_with_sum(x, r, ...) == {x + r, layer_norm(x + r, ...)}    (pre-norm: the sum is
//                                         the next residual)
// bit for bit (values and gradients), at any thread count. One pass per row each way: the forward
// writes s = x + r and normalizes the row while it is in cache; the backward computes
// ds = layer_norm's dx + the gradient of s (when s is used) and writes it for x and for r in the
// same pass (gradients are Arrays the engine owns one per input, so the second is a second store
// stream, not a copy pass afterwards), with dweight / dbias summed per fixed block of rows as
// layer_norm does.
// In the graph: add_layer_norm is one node over (x, r[, weight][, bias]) whose value is y. With the
// sum, the node over the inputs holds a placeholder scalar and runs the fused backward once; y and s
// are two nodes over it that only hand it their gradients (autograd::Function's layout for several
// outputs, function.hpp), so the backward still runs once, after both have arrived. Under
// create_graph both use a GradFormula (layer_norm's, then the add's). x and r of different shapes
// (broadcasting) and a running trace::Recorder take the unfused ops (add, then layer_norm), so that
// traces and ONNX exports are those of the unfused layer. The backward recomputes s from x and r
// (s is not kept for it): changing x or r in place before the backward is refused as for any op
// that saves its inputs.
template <class T>
Tensor<T> add_layer_norm(const Tensor<T>& x, const Tensor<T>& r, const ShapeArg& normalized_shape,
                         const Tensor<T>& weight = {}, const Tensor<T>& bias = {}, double eps = 1e-5);
template <class T>
std::pair<Tensor<T>, Tensor<T>> add_layer_norm_with_sum(const Tensor<T>& x, const Tensor<T>& r,
                                                        const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                                                        const Tensor<T>& bias = {}, double eps = 1e-5);

// ---- rms_norm.cpp -----------------------------------------------------------------------------

// F.rms_norm (PyTorch >= 2.4; transformers' LlamaRMSNorm) over the trailing normalized_shape dims:
// y = x / sqrt(mean(x^2) + eps) * weight, no centering and no bias; weight (of normalized_shape) may
// be undefined; eps defaults to std::numeric_limits<T>::epsilon() (torch.finfo(x.dtype).eps). One
// fused node with its statistics accumulated in double.
template <class T>
Tensor<T> rms_norm(const Tensor<T>& x, const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                   std::optional<double> eps = std::nullopt);

// The residual add fused into the RMSNorm after it, for the pre-norm residual line of a Llama
// block (add_layer_norm_with_sum's layout, ops.hpp):
//   add_rms_norm_with_sum(x, r, ...) == {x + r, rms_norm(x + r, ...)}
// bit for bit (values and gradients), at any thread count. One pass per row each way: the forward
// writes s = x + r and normalizes the row while it is in cache; the backward writes ds = rms_norm's
// dx + the gradient of s for x and for r in the same pass. x and r of different shapes
// (broadcasting) and a running trace::Recorder take the unfused ops (add, then rms_norm). The
// backward recomputes s from x and r: changing either in place before it is refused, as for any op
// that saves its inputs.
template <class T>
std::pair<Tensor<T>, Tensor<T>> add_rms_norm_with_sum(const Tensor<T>& x, const Tensor<T>& r,
                                                      const ShapeArg& normalized_shape, const Tensor<T>& weight = {},
                                                      std::optional<double> eps = std::nullopt);

// ---- rotary_embedding.cpp: rotary position embeddings (RoPE) as Hugging Face's Llama applies them
// The op, and the tables of inverse frequencies and of cos / sin it is fed with:
//   const Tensor<float> inv_freq = rope_inv_freq<float>(head_dim, 10000.0);   // once, a constant
//   const auto [cos, sin] = rope_cos_sin(inv_freq, positions);               // (T, head_dim) each
//   q = rotary_embedding(q, cos, sin);                                       // q: (B, H, T, head_dim)
// The layout is transformers' rotate_half, NOT interleaved pairs: element j of a head's first half
// rotates with element j + D/2 (Hugging Face checkpoints' q/k rows are permuted for this layout).

// transformers' LlamaModel apply_rotary_pos_emb, for one of q or k:
//   y = x * cos + rotate_half(x) * sin,   rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])
// x: (..., T, D) with D even ((B, H, T, D) in the models); cos, sin: one shape, broadcastable to
// x's with the same last dim D: (T, D), (1, T, D), (B, 1, T, D) for x (B, H, T, D). y: x's shape.
// cos and sin are constants of the model (transformers computes them under no_grad): one that
// requires grad is refused. The gradient goes to x only, exact for any cos and sin:
//   dx = g * cos + rotate_half^T(g * sin),   rotate_half^T(u) = cat(u[..., D/2:], -u[..., :D/2])
// One node; differentiable again (create_graph). In float32 its values and gradients are torch's
// bit for bit (the same products and sums, unfused).
template <class T>
Tensor<T> rotary_embedding(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin);

// The same in place, for inference (a KV-cache decode step): x's value becomes
// rotary_embedding(x, cos, sin)'s, bit for bit, without a node or a new array; returns x. Its
// version() is bumped, so a node that saved x refuses its backward. Refused while grad mode is on
// and x requires grad (no gradient would be recorded: use rotary_embedding) and while a trace
// records (an ONNX export would miss it).
template <class T>
const Tensor<T>& rotary_embedding_(const Tensor<T>& x, const Tensor<T>& cos, const Tensor<T>& sin);

// config.json's rope_scaling, as transformers' modeling_rope_utils reads it (its key `type` is an
// old spelling of rope_type). rope_type:
//   "default"  no scaling (the other fields are unused)
//   "linear"   inv_freq / factor
//   "llama3"   Llama 3.1's: wavelen = 2 pi / inv_freq; low-frequency wavelengths
//              (> original_max_position_embeddings / low_freq_factor) are divided by factor,
//              high-frequency ones (< original / high_freq_factor) kept, those between blended
//              (_compute_llama3_parameters).
// Any other rope_type is refused by name. The defaults below the type are Llama 3.1's values for
// the llama3 fields (its factor is 8; here 1, so that "linear" without a factor changes nothing).
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};
// Equal when they scale alike: the fields a rope_type does not use are not compared.
inline bool operator==(const RopeScaling& a, const RopeScaling& b) {
  if (a.rope_type != b.rope_type) return false;
  if (a.rope_type == "default") return true;
  return a.factor == b.factor && (a.rope_type != "llama3" ||
                                  (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
                                   a.original_max_position_embeddings == b.original_max_position_embeddings));
}
inline bool operator!=(const RopeScaling& a, const RopeScaling& b) { return !(a == b); }

// The dim / 2 inverse frequencies of LlamaRotaryEmbedding (its inv_freq buffer), dim =
// int(head_dim * partial_rotary_factor), even:
//   inv_freq[i] = 1 / rope_theta^(2i / dim), then rope_scaling applied.
// Computed in T throughout, in transformers' order of operations: for T = float its float32 values
// (torch.arange(0, dim, 2).float() / dim, the power and the scaling in float32), for T = double
// the same in float64. A plain tensor (no grad).
template <class T>
Tensor<T> rope_inv_freq(std::int64_t head_dim, double rope_theta, const RopeScaling& scaling = {},
                        double partial_rotary_factor = 1.0);

// LlamaRotaryEmbedding.forward: for positions of any shape (P...), with n = inv_freq's length,
//   freqs = position * inv_freq (in T),  emb = cat(freqs, freqs),  cos = cos(emb), sin = sin(emb)
// as (P..., 2n) tensors (no grad). Positions (T) give the (T, D) tables rotary_embedding takes;
// (B, T) gives (B, T, D), to unsqueeze to (B, 1, T, D). attention_scaling is 1 for the rope types
// above.
template <class T>
std::pair<Tensor<T>, Tensor<T>> rope_cos_sin(const Tensor<T>& inv_freq, const IndexArray& positions);

// ---- dropout.cpp ------------------------------------------------------------------------------

// F.dropout: in training zeroes each element with probability p and scales the rest by
// 1/(1-p); otherwise (or p = 0) returns a unchanged. Randomness from `generator`, or the
// default generator when null.
template <class T>
Tensor<T> dropout(const Tensor<T>& a, double p = 0.5, bool training = true, Generator* generator = nullptr);

// ---- attention.cpp ----------------------------------------------------------------------------

// An attention mask: none, bool (true = may NOT attend) or float (added to the logits).
template <class T>
class AttnMask {
 public:
  AttnMask() = default;
  AttnMask(BoolArray mask) : mask_(std::move(mask)) {}   // NOLINT: implicit on purpose
  AttnMask(Array<T> mask) : mask_(std::move(mask)) {}    // NOLINT
  bool empty() const { return std::holds_alternative<std::monostate>(mask_); }
  bool is_bool() const { return std::holds_alternative<BoolArray>(mask_); }
  const BoolArray& bool_mask() const { return std::get<BoolArray>(mask_); }
  const Array<T>& float_mask() const { return std::get<Array<T>>(mask_); }

 private:
  std::variant<std::monostate, BoolArray, Array<T>> mask_;
};

// F.scaled_dot_product_attention: q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev),
// leading dims equal. softmax(q k^T * scale + mask) v with scale = 1/sqrt(E) by default; the
// mask broadcasts to (..., L, S); is_causal masks keys after each query (and may not be combined
// with attn_mask). Dropout with dropout_p on the probabilities. One fused node; a query whose
// keys are all masked gets a zero output and finite (zero) gradients. enable_gqa (grouped-query
// attention) lets k and v have fewer heads at dim -3: q (..., Hq, L, E), k (..., Hkv, S, E),
// v (..., Hkv, S, Ev) with Hq a multiple of Hkv; query head j reads KV head j / (Hq / Hkv), as if
// k and v were repeat_interleave'd along dim -3, and a KV head's gradient sums over its query
// heads. The op behind it, which can also return the probabilities (MultiheadAttention's
// need_weights), is in attention.hpp.
template <class T>
Tensor<T> scaled_dot_product_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                       const AttnMask<T>& attn_mask = {}, double dropout_p = 0.0,
                                       bool is_causal = false, std::optional<double> scale = std::nullopt,
                                       bool enable_gqa = false, Generator* generator = nullptr);
// A generator where enable_gqa stands (the order before enable_gqa) would convert to `true`: refused.
template <class T>
Tensor<T> scaled_dot_product_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                       const AttnMask<T>& attn_mask, double dropout_p, bool is_causal,
                                       std::optional<double> scale, Generator* generator) = delete;

// Which implementation scaled_dot_product_attention and nn.MultiheadAttention run, process-wide:
//   Auto (default): Tiled from L S >= 256^2 logits per batch-head when causal, from 1024^2
//                   otherwise (where each was measured ahead), else Materialized;
//   Materialized: P (..., L, S) kept for the backward (memory quadratic in the length);
//   Tiled: blocks of queries against blocks of keys with an online softmax, one log-sum-exp
//          per query kept, P recomputed block by block in the backward (memory linear).
// Both give the same values and gradients (to rounding) for every mask, causal and dropout (the
// same dropout mask). need_weights=true always runs Materialized: it returns P.
enum class AttentionPath { Auto, Materialized, Tiled };
void set_attention_path(AttentionPath path);
AttentionPath get_attention_path();

// ---- loss.cpp ---------------------------------------------------------------------------------

// reduction: "mean" (default), "sum" or "none".
template <class T>
Tensor<T> mse_loss(const Tensor<T>& input, const Tensor<T>& target, const std::string& reduction = "mean");
// F.cross_entropy with class indices: logits (N, C) or (C) or (N, C, d1, ...), target (N) or ()
// or (N, d1, ...). Targets equal to ignore_index contribute nothing; "mean" divides by the
// number of the others. label_smoothing mixes in the uniform distribution. Computed through a
// stable log-softmax, one node.
template <class T>
Tensor<T> cross_entropy(const Tensor<T>& logits, const IndexArray& target, std::int64_t ignore_index = -100,
                        const std::string& reduction = "mean", double label_smoothing = 0.0);

// ---- triangular.cpp, sorting.cpp, multinomial.cpp: triangles, argmax, topk, sort, multinomial ---
// (sample_next_token, the sampler text generation uses, is in models/sampling.hpp.)

// torch.tril / torch.triu over the last two dims of a (..., R, C): tril keeps a[..., i, j] with
// j - i <= diagonal, triu those with j - i >= diagonal, the rest is 0 (and gets no gradient).
template <class T> Tensor<T> tril(const Tensor<T>& a, std::int64_t diagonal = 0);
template <class T> Tensor<T> triu(const Tensor<T>& a, std::int64_t diagonal = 0);
// torch.argmax: the index of the first maximum along dim (a NaN counts as the maximum);
// without dim, over the flattened input (a 0-d result). Not differentiable.
template <class T> IndexArray argmax(const Tensor<T>& a, std::int64_t dim, bool keepdim = false);
template <class T> IndexArray argmax(const Tensor<T>& a);
// torch.topk: the k largest (or smallest) values along dim and their indices; sorted = true gives
// them in descending (ascending) order, sorted = false in increasing index order. Equal values
// come by increasing index (a stable order; torch leaves it unspecified); NaN counts as larger
// than every number. The values' gradient goes back to the chosen indices.
template <class T>
std::pair<Tensor<T>, IndexArray> topk(const Tensor<T>& a, std::int64_t k, std::int64_t dim = -1, bool largest = true,
                                      bool sorted = true);
// torch.sort, always stable (torch's stable=True): equal values keep their index order; NaN
// sorts as larger than every number. The values' gradient goes back to the indices.
template <class T>
std::pair<Tensor<T>, IndexArray> sort(const Tensor<T>& a, std::int64_t dim = -1, bool descending = false);
// torch.multinomial: probs (C) or (N, C) of non-negative, finite weights (need not sum to 1)
// -> (num_samples) or (N, num_samples) category indices drawn from `generator` (the default
// generator when null). Without replacement a category is drawn at most once, so num_samples
// may not exceed the categories of positive weight. A negative, inf or NaN weight, an all-zero
// row or num_samples <= 0 throws. Not PyTorch's random stream, only as reproducible.
template <class T>
IndexArray multinomial(const Tensor<T>& probs, std::int64_t num_samples, bool replacement = false,
                       Generator* generator = nullptr);

}  // namespace xgrad
