// F.scaled_dot_product_attention
// (https://pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
// as one fused node: hand-derived forward and backward over contiguous data, gemm for the
// products (llm.c's attention_forward / attention_backward), looped over the batch.
//
// Per batch b (batch = product of the leading dims), q: (L, E), k: (S, E), v: (S, Ev):
//   A  = scale * q k^T + M        (L, S)   M: the float mask, or -inf where masked (bool, causal)
//   P  = softmax(A) along S       (L, S)   max-subtracted; a row whose keys are all masked gets
//                                          P = 0 (PyTorch gives NaN there on some paths)
//   Pd = P * D                    (L, S)   D: dropout mask, 0 or 1/(1-p); D = 1 when p = 0
//   O  = Pd v                     (L, Ev)
// Backward from dO (L, Ev):
//   dV  = Pd^T dO                 (S, Ev)
//   dPd = dO v^T                  (L, S)
//   dP  = dPd * D
//   dA  = P * (dP - rowsum(dP * P))        zero wherever P = 0: masked keys and fully masked
//                                          rows pass no gradient (and stay finite)
//   dQ  = scale * dA k            (L, E)
//   dK  = scale * dA^T q          (S, E)
// A float mask is a constant array: it gets no gradient. A bool mask follows
// nn.MultiheadAttention's convention, true = may NOT attend (ops.hpp, SEMANTICS.md); note that
// torch's F.scaled_dot_product_attention reads its bool masks the other way (true = attend).

// GCC 12's avx512fintrin.h trips -W(maybe-)uninitialized inside xsimd's AVX-512 kernels (GCC bug
// 105593, fixed in GCC 13). The warning fires where the intrinsics are inlined, in this file, so
// simd.hpp's push/pop around its include does not cover it: ignore it for the whole unit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include <xgrad/autograd/broadcast.hpp>
#include <xgrad/autograd/gemm.hpp>
#include <xgrad/autograd/ops.hpp>
#include <xgrad/autograd/parallel.hpp>
#include <xgrad/autograd/simd.hpp>

namespace xgrad {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// "q (..), k (..), v (..)" for error messages, formatted only when a check fails.
struct QkvShapes {
  const Shape& q;
  const Shape& k;
  const Shape& v;
};
std::ostream& operator<<(std::ostream& s, const QkvShapes& g) {
  return s << "q " << shape_str(g.q) << ", k " << shape_str(g.k) << ", v " << shape_str(g.v);
}

// Where the (L, S) block of the mask for each batch starts, and its strides along L and S
// (0 on broadcast dims).
struct MaskLayout {
  std::vector<std::size_t> batch_offset;
  std::size_t stride_l = 0;
  std::size_t stride_s = 0;
};

// mask broadcast (NumPy rules, no new dims beyond target's) against target = (..., L, S).
MaskLayout mask_layout(const Shape& mask, const Shape& target, std::size_t batch, const QkvShapes& got) {
  bool ok = mask.size() <= target.size();
  for (std::size_t d = 0; ok && d < mask.size(); ++d) {
    const std::size_t md = mask[mask.size() - 1 - d], td = target[target.size() - 1 - d];
    ok = md == td || md == 1;
  }
  XGRAD_CHECK(ok, kOp, ": attn_mask of shape ", mask, " cannot be broadcast to (..., L, S) = ", target,
              " (", got, ")");
  const std::vector<std::size_t> strides = detail::broadcast_strides(mask, target);
  const std::size_t nd = target.size();
  MaskLayout layout;
  layout.stride_l = strides[nd - 2];
  layout.stride_s = strides[nd - 1];
  layout.batch_offset.resize(batch);
  // Walk the leading dims row-major, carrying the offset along.
  std::vector<std::size_t> idx(nd - 2, 0);
  std::size_t offset = 0;
  for (std::size_t b = 0; b < batch; ++b) {
    layout.batch_offset[b] = offset;
    for (std::size_t d = nd - 2; d-- > 0;) {
      if (++idx[d] < target[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (idx[d] - 1);
      idx[d] = 0;
    }
  }
  return layout;
}

// row <- softmax(row), max-subtracted; all zeros when every entry is -inf.
template <class T>
void softmax_row(T* row, std::size_t n) {
  const T m = detail::simd_max(row, n);
  if (m == -std::numeric_limits<T>::infinity()) {
    std::fill(row, row + n, T(0));
    return;
  }
  const T inv = T(1) / detail::simd_exp_sub_sum(row, m, row, n);
  for (std::size_t j = 0; j < n; ++j) row[j] *= inv;
}

// Batches per thread chunk: at least ~64K multiply-adds of score work, so that tiny attention stays
// on one thread. Each batch (one head of one sequence) is independent, with its own gemms.
std::size_t batch_grain(std::size_t L, std::size_t S, std::size_t E) {
  return std::max<std::size_t>(1, (std::size_t(1) << 16) / std::max<std::size_t>(1, L * S * E));
}

// The node of both entry points. inputs: {q, k, v}, or {qkv} when packed: qkv (3, lead..., L, E)
// holds q, k and v one after the other (S = L, Ev = E). Shapes are checked by the caller.
template <class T>
Tensor<T> attention_node(std::vector<Tensor<T>> inputs, bool packed, const Shape& lead, std::size_t L,
                         std::size_t S, std::size_t E, std::size_t Ev, const AttnMask<T>& attn_mask,
                         double dropout_p, bool is_causal, std::optional<double> scale, Generator* generator,
                         const QkvShapes& got) {
  std::size_t batch = 1;
  for (std::size_t d : lead) batch *= d;
  const T alpha = T(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(E)));

  Shape target = lead;  // (..., L, S)
  target.push_back(L);
  target.push_back(S);
  MaskLayout layout;
  if (!attn_mask.empty()) {
    const Shape sm = attn_mask.is_bool() ? shape_of(attn_mask.bool_mask()) : shape_of(attn_mask.float_mask());
    layout = mask_layout(sm, target, batch, got);
  }

  Shape out_shape = lead;  // (..., L, Ev)
  out_shape.push_back(L);
  out_shape.push_back(Ev);
  Array<T> out = empty_array<T>(out_shape);
  Array<T> P = empty_array<T>({batch, L, S});  // softmax probabilities, before dropout
  Array<T> D;                                  // dropout mask (batch, L, S); empty when p = 0
  const bool dropping = dropout_p > 0.0;
  // Nothing to compute: no queries, no keys (every row fully masked: O = 0) or Ev = 0.
  const bool trivial = out.size() == 0 || S == 0;

  if (dropping) {
    D = empty_array<T>({batch, L, S});
    T* pd = D.data();
    if (dropout_p == 1.0) {
      std::fill(pd, pd + D.size(), T(0));
    } else {
      Generator& gen = generator ? *generator : default_generator();
      const T keep_scale = T(1.0 / (1.0 - dropout_p));
      for (std::size_t i = 0, n = D.size(); i < n; ++i) pd[i] = T(gen.uniform() >= dropout_p) * keep_scale;
    }
  }

  if (trivial) {
    std::fill(out.data(), out.data() + out.size(), T(0));
    std::fill(P.data(), P.data() + P.size(), T(0));
  } else {
    const T* qd = inputs[0].value().data();
    const T* kd = packed ? qd + batch * L * E : inputs[1].value().data();
    const T* vd = packed ? kd + batch * S * E : inputs[2].value().data();
    const bool* bool_mask = !attn_mask.empty() && attn_mask.is_bool() ? attn_mask.bool_mask().data() : nullptr;
    const T* float_mask = !attn_mask.empty() && !attn_mask.is_bool() ? attn_mask.float_mask().data() : nullptr;
    const T neg_inf = -std::numeric_limits<T>::infinity();
    detail::parallel_for(batch, batch_grain(L, S, std::max(E, Ev)), [&](std::size_t b0, std::size_t b1) {
      std::vector<T> dropped(dropping ? L * S : 0);  // Pd of one batch
      for (std::size_t b = b0; b < b1; ++b) {
        const T* qb = qd + b * L * E;
        const T* kb = kd + b * S * E;
        const T* vb = vd + b * S * Ev;
        T* pb = P.data() + b * L * S;
        // A = scale * q k^T
        detail::gemm<T>(false, true, L, S, E, alpha, qb, E, kb, E, T(0), pb, S);
        for (std::size_t i = 0; i < L; ++i) {
          T* row = pb + i * S;
          if (bool_mask) {
            const bool* m = bool_mask + layout.batch_offset[b] + i * layout.stride_l;
            for (std::size_t j = 0; j < S; ++j)
              if (m[j * layout.stride_s]) row[j] = neg_inf;
          } else if (float_mask) {
            const T* m = float_mask + layout.batch_offset[b] + i * layout.stride_l;
            for (std::size_t j = 0; j < S; ++j) row[j] += m[j * layout.stride_s];
          } else if (is_causal) {
            for (std::size_t j = i + 1; j < S; ++j) row[j] = neg_inf;
          }
          softmax_row(row, S);
        }
        const T* pv = pb;
        if (dropping) {
          const T* db = D.data() + b * L * S;
          for (std::size_t n = 0; n < L * S; ++n) dropped[n] = pb[n] * db[n];
          pv = dropped.data();
        }
        // O = Pd v
        detail::gemm<T>(false, false, L, Ev, S, T(1), pv, S, vb, Ev, T(0), out.data() + b * L * Ev, Ev);
      }
    });
  }

  return make_result<T>(
      kOp, std::move(out), std::move(inputs),
      [P = std::move(P), D = std::move(D), alpha, batch, L, S, E, Ev, dropping, trivial, packed](Node<T>& node) {
        const bool need_q = node.input_needs_grad(0), need_k = node.input_needs_grad(packed ? 0 : 1),
                   need_v = node.input_needs_grad(packed ? 0 : 2);
        // dq, dk, dv: three arrays, or one (3, ..., L, E) array for the packed input.
        Array<T> dq, dk, dv;
        if (need_q) dq = Array<T>::from_shape(node.input_value(0).shape());
        if (need_k && !packed) dk = Array<T>::from_shape(node.input_value(1).shape());
        if (need_v && !packed) dv = Array<T>::from_shape(node.input_value(2).shape());
        T* dqp = need_q ? dq.data() : nullptr;
        T* dkp = packed ? (need_q ? dqp + batch * L * E : nullptr) : (need_k ? dk.data() : nullptr);
        T* dvp = packed ? (need_q ? dkp + batch * S * E : nullptr) : (need_v ? dv.data() : nullptr);
        if (trivial) {
          if (need_q) dq.fill(T(0));
          if (need_k && !packed) dk.fill(T(0));
          if (need_v && !packed) dv.fill(T(0));
        } else {
          const T* qd = node.input_value(0).data();
          const T* kd = packed ? qd + batch * L * E : node.input_value(1).data();
          const T* vd = packed ? kd + batch * S * E : node.input_value(2).data();
          const T* dO = node.grad.data();
          const bool need_scores = need_q || need_k;
          detail::parallel_for(batch, batch_grain(L, S, std::max(E, Ev)), [&](std::size_t b0, std::size_t b1) {
            std::vector<T> dA(need_scores ? L * S : 0);
            std::vector<T> dropped(dropping && need_v ? L * S : 0);
            for (std::size_t b = b0; b < b1; ++b) {
              const T* pb = P.data() + b * L * S;
              const T* db = dropping ? D.data() + b * L * S : nullptr;
              const T* dOb = dO + b * L * Ev;
              if (need_v) {
                // dV = Pd^T dO
                const T* pv = pb;
                if (dropping) {
                  for (std::size_t n = 0; n < L * S; ++n) dropped[n] = pb[n] * db[n];
                  pv = dropped.data();
                }
                detail::gemm<T>(true, false, S, Ev, L, T(1), pv, S, dOb, Ev, T(0), dvp + b * S * Ev, Ev);
              }
              if (!need_scores) continue;
              // dPd = dO v^T, then dA = P * (dP - rowsum(dP * P)) with dP = dPd * D
              detail::gemm<T>(false, true, L, S, Ev, T(1), dOb, Ev, vd + b * S * Ev, Ev, T(0), dA.data(), S);
              for (std::size_t i = 0; i < L; ++i) {
                T* g = dA.data() + i * S;
                const T* p = pb + i * S;
                if (dropping) {
                  const T* m = db + i * S;
                  for (std::size_t j = 0; j < S; ++j) g[j] *= m[j];
                }
                const T gp = detail::simd_dot(g, p, S);
                for (std::size_t j = 0; j < S; ++j) g[j] = p[j] * (g[j] - gp);
              }
              // dQ = scale * dA k;  dK = scale * dA^T q
              if (need_q)
                detail::gemm<T>(false, false, L, E, S, alpha, dA.data(), S, kd + b * S * E, E, T(0),
                                dqp + b * L * E, E);
              if (need_k)
                detail::gemm<T>(true, false, S, E, L, alpha, dA.data(), S, qd + b * L * E, E, T(0),
                                dkp + b * S * E, E);
            }
          });
        }
        if (need_q) node.input(0).accumulate_grad(std::move(dq));
        if (packed) return;
        if (need_k) node.input(1).accumulate_grad(std::move(dk));
        if (need_v) node.input(2).accumulate_grad(std::move(dv));
      });
}

}  // namespace

template <class T>
Tensor<T> scaled_dot_product_attention(const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                       const AttnMask<T>& attn_mask, double dropout_p, bool is_causal,
                                       std::optional<double> scale, Generator* generator) {
  const Shape sq = q.shape(), sk = k.shape(), sv = v.shape();
  const QkvShapes got{sq, sk, sv};
  const std::size_t nd = sq.size();
  XGRAD_CHECK(nd >= 2 && sk.size() == nd && sv.size() == nd, kOp,
              ": expected q (..., L, E), k (..., S, E) and v (..., S, Ev) of the same rank, at least 2, got ", got);
  XGRAD_CHECK(std::equal(sq.begin(), sq.end() - 2, sk.begin()) && std::equal(sq.begin(), sq.end() - 2, sv.begin()),
              kOp, ": q, k and v must have equal leading dims, got ", got);
  XGRAD_CHECK(sk[nd - 1] == sq[nd - 1], kOp, ": q and k must have the same embedding size E, got ", got);
  XGRAD_CHECK(sv[nd - 2] == sk[nd - 2], kOp, ": k and v must have the same sequence length S, got ", got);
  XGRAD_CHECK(sq[nd - 1] > 0, kOp, ": the embedding size E must be positive, got ", got);
  XGRAD_CHECK(!(is_causal && !attn_mask.empty()), kOp,
              ": explicit attn_mask should not be set when is_causal=true (", got, ")");
  XGRAD_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, kOp, ": dropout_p has to be between 0 and 1, but got ",
              dropout_p);

  return attention_node<T>({q, k, v}, false, Shape(sq.begin(), sq.end() - 2), sq[nd - 2], sk[nd - 2], sq[nd - 1],
                           sv[nd - 1], attn_mask, dropout_p, is_causal, scale, generator, got);
}
template <class T>
Tensor<T> detail::self_attention_packed(const Tensor<T>& qkv, const AttnMask<T>& attn_mask, double dropout_p,
                                        bool is_causal, Generator* generator) {
  const Shape s = qkv.shape();
  XGRAD_CHECK(s.size() >= 3 && s[0] == 3 && s.back() > 0, kOp, ": expected a packed qkv of shape (3, ..., L, E), got ",
              s);
  XGRAD_CHECK(!(is_causal && !attn_mask.empty()), kOp, ": explicit attn_mask should not be set when is_causal=true");
  XGRAD_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, kOp, ": dropout_p has to be between 0 and 1, but got ",
              dropout_p);
  const Shape one(s.begin() + 1, s.end());  // the shape of each of q, k, v
  const std::size_t nd = one.size();
  return attention_node<T>({qkv}, true, Shape(one.begin(), one.end() - 2), one[nd - 2], one[nd - 2], one[nd - 1],
                           one[nd - 1], attn_mask, dropout_p, is_causal, std::nullopt, generator,
                           QkvShapes{one, one, one});
}

#define XGRAD_INSTANTIATE(T)                                                                          \
  template Tensor<T> scaled_dot_product_attention<T>(const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                                     const AttnMask<T>&, double, bool, std::optional<double>, \
                                                     Generator*);                                             \
  template Tensor<T> detail::self_attention_packed<T>(const Tensor<T>&, const AttnMask<T>&, double, bool,      \
                                                      Generator*);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
