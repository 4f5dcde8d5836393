// The attention mask normaliser (attention.hpp): every mask kind F.scaled_dot_product_attention and
// nn.MultiheadAttention take (bool or float, 2-D or 3-D attn_mask, key_padding_mask, is_causal)
// -> the one AttentionMask the fused kernels in attention.cpp read.
#include <xgrad/ops/attention/attention.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xbroadcast.hpp>

namespace xgrad {

namespace {

// ---- the mask normaliser ----------------------------------------------------------------------

std::size_t product(const Shape& s, std::size_t first, std::size_t last) {
  std::size_t n = 1;
  for (std::size_t d = first; d < last; ++d) n *= s[d];
  return n;
}

// A bool mask as the float mask it stands for: 0 where attended, -inf where masked.
template <class T>
Array<T> additive(const AttnMask<T>& m) {
  if (!m.is_bool()) return m.float_mask();
  const BoolArray& b = m.bool_mask();
  Array<T> f = empty_array<T>(shape_of(b), "attention mask");
  std::transform(b.begin(), b.end(), f.begin(),
                 [](bool masked) { return masked ? -std::numeric_limits<T>::infinity() : T(0); });
  return f;
}

// Calls f(array) on the bool or the float array of a non-empty mask; f returns an AttnMask.
template <class T, class F>
AttnMask<T> visit(const AttnMask<T>& m, F f) {
  return m.is_bool() ? f(m.bool_mask()) : f(m.float_mask());
}

}  // namespace

bool detail::mask_broadcasts_to(const Shape& mask, const Shape& target) {
  if (mask.size() > target.size()) return false;
  for (std::size_t d = 0; d < mask.size(); ++d) {
    const std::size_t md = mask[mask.size() - 1 - d], td = target[target.size() - 1 - d];
    if (md != td && md != 1) return false;
  }
  return true;
}

template <class T>
bool detail::AttentionMask<T>::per_batch() const {
  return !mask.empty() && (mask.is_bool() ? mask.bool_mask().dimension() : mask.float_mask().dimension()) == 3;
}

namespace {

// attn_mask at target's rank, broadcastable to it: as given, or a (B, L, S) one reshaped to
// (lead..., L, S).
template <class T>
AttnMask<T> attn_mask_at_rank(const AttnMask<T>& attn_mask, const Shape& target, const Shape& flat) {
  return visit(attn_mask, [&](const auto& a) -> AttnMask<T> {
    auto m = a;
    if (shape_of(a) == flat && flat != target) m.reshape(target);
    XGRAD_CHECK(detail::mask_broadcasts_to(shape_of(m), target), "attention mask: attn_mask of shape ", a.shape(),
                " can neither be broadcast to (..., L, S) = ", target, " nor is it (B, L, S) = ", flat);
    return m;
  });
}

// key_padding_mask, (S) or (N, S), at target's rank: (S) as given, (N, S) as (N, 1, ..., 1, S).
template <class T>
AttnMask<T> key_padding_at_rank(const AttnMask<T>& key_padding_mask, const Shape& target) {
  const std::size_t nd = target.size(), S = target[nd - 1];
  return visit(key_padding_mask, [&](const auto& a) -> AttnMask<T> {
    const Shape s = shape_of(a);
    const bool batched = nd >= 3 && s == Shape{target[0], S};
    XGRAD_CHECK(s == Shape{S} || batched, "attention mask: key_padding_mask must be (S) = (", S, ")",
                (nd >= 3 ? " or (N, S) = " + shape_str(Shape{target[0], S}) : std::string()), ", got ", s);
    auto m = a;
    if (batched) {
      Shape r(nd, 1);
      r[0] = target[0];
      r[nd - 1] = S;
      m.reshape(r);
    }
    return m;
  });
}

// A mask at target's rank in the kernels' frame: (B, L, S) when per_batch (some mask varies along
// the leading dims), else its last two dims (1 when absent) broadcast to (L, S).
template <class T>
AttnMask<T> in_frame(const AttnMask<T>& m, bool per_batch, const Shape& target, const Shape& flat) {
  return visit(m, [&](const auto& a) -> AttnMask<T> {
    using A = std::decay_t<decltype(a)>;
    if (per_batch) {
      A full = xt::broadcast(a, target);
      full.reshape(flat);
      return full;
    }
    const Shape s = shape_of(a);
    A two = a;
    two.reshape(Shape{s.size() >= 2 ? s[s.size() - 2] : 1, s.empty() ? 1 : s.back()});
    return A(xt::broadcast(two, Shape{flat[1], flat[2]}));
  });
}

}  // namespace

// attn_mask and key_padding_mask, each at target's rank, then in one frame, then combined: one mask
// as it is, two bool masks or'ed, otherwise their additive forms summed.
template <class T>
detail::AttentionMask<T> detail::normalize_attention_mask(const Shape& target, const AttnMask<T>& attn_mask,
                                                          const AttnMask<T>& key_padding_mask, bool is_causal) {
  const std::size_t nd = target.size();
  XGRAD_CHECK(nd >= 2, "attention mask: the logits must be (..., L, S), got ", target);
  const Shape flat{product(target, 0, nd - 2), target[nd - 2], target[nd - 1]};
  std::vector<AttnMask<T>> given;
  if (!attn_mask.empty()) given.push_back(attn_mask_at_rank(attn_mask, target, flat));
  if (!key_padding_mask.empty()) given.push_back(key_padding_at_rank(key_padding_mask, target));

  AttentionMask<T> out;
  out.is_causal = is_causal;
  if (given.empty()) return out;
  bool per_batch = false, all_bool = true;
  for (const auto& m : given) {
    const Shape ms = m.is_bool() ? shape_of(m.bool_mask()) : shape_of(m.float_mask());
    per_batch = per_batch || (ms.size() > 2 && product(ms, 0, ms.size() - 2) > 1);
    all_bool = all_bool && m.is_bool();
  }
  std::vector<AttnMask<T>> framed;
  for (const auto& m : given) framed.push_back(in_frame(m, per_batch, target, flat));
  if (framed.size() == 1) {
    out.mask = std::move(framed[0]);
  } else if (all_bool) {
    out.mask = BoolArray(framed[0].bool_mask() || framed[1].bool_mask());
  } else {
    out.mask = Array<T>(additive(framed[0]) + additive(framed[1]));
  }
  return out;
}

#define XGRAD_INSTANTIATE(T)                                                                              \
  template struct detail::AttentionMask<T>;                                                               \
  template detail::AttentionMask<T> detail::normalize_attention_mask<T>(const Shape&, const AttnMask<T>&, \
                                                                        const AttnMask<T>&, bool);
XGRAD_INSTANTIATE(float)
XGRAD_INSTANTIATE(double)
#undef XGRAD_INSTANTIATE

}  // namespace xgrad
