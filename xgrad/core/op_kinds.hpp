// The identity of every op, as one list: the only place an op's name is written. An op opens its
// OpScope (xgrad/ops/op_scope.hpp) with its kind, which profiles it, names its node and records it
// in a trace (xgrad/core/trace.hpp) with its kind; exporters key their tables by that kind
// (xgrad/onnx/op_table.cpp), never by matching name strings. A test (tests/onnx/test_op_table.cpp)
// runs every kind's op under a trace and checks that it records itself under its kind, and another
// (tests/ops/test_op_identity.cpp) that no op file writes an op's name as a literal. An op added
// here needs a row in onnx's table (a compile error until it has one) and a sample in that test.
//
//   if (recorded.kind) ...            // nullopt: no op of xgrad's (a custom autograd::Function)
//   op_name(OpKind::layer_norm)       // "layer_norm"
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

// clang-format off
// X(name): the enumerator, and the name the op's OpScope gives its node (or trace::Composite its record).
#define XGRAD_OP_KINDS(X)                                                                                   \
  /* elementwise.cpp */                                                                                     \
  X(add) X(sub) X(mul) X(div) X(rsub) X(rdiv) X(neg) X(pow) X(exp) X(log) X(sqrt) X(abs) X(tanh) X(sigmoid) \
  X(silu) X(relu) X(gelu) X(clamp)                                                                          \
  /* core/tensor.cpp: Tensor::detach */                                                                    \
  X(detach)                                                                                                 \
  /* reduction.cpp */                                                                                       \
  X(sum) X(mean) X(var) X(amax) X(max)                                                                      \
  /* shape.cpp */                                                                                           \
  X(transpose) X(permute) X(reshape) X(flatten) X(unsqueeze) X(squeeze) X(expand) X(cat) X(stack) X(narrow) \
  X(slice)                                                                                                  \
  /* indexing.cpp */                                                                                        \
  X(index_select) X(embedding) X(masked_fill) X(where)                                                      \
  /* matmul.cpp, softmax.cpp, layer_norm.cpp, dropout.cpp, loss.cpp */                                     \
  X(matmul) X(linear) X(softmax) X(log_softmax) X(layer_norm) X(dropout) X(mse_loss) X(cross_entropy)       \
  /* rms_norm.cpp, rotary_embedding.cpp */                                                                  \
  X(rms_norm) X(rotary_embedding)                                                                           \
  /* triangular.cpp, sorting.cpp */                                                                        \
  X(tril) X(triu) X(topk) X(sort)                                                                           \
  /* composites: attention/attention.cpp, nn/multihead_attention.cpp */                                     \
  X(scaled_dot_product_attention) X(multi_head_attention)
// clang-format on

namespace xgrad {

enum class OpKind : std::uint8_t {
#define XGRAD_OP_KIND_ENUMERATOR(name) name,
  XGRAD_OP_KINDS(XGRAD_OP_KIND_ENUMERATOR)
#undef XGRAD_OP_KIND_ENUMERATOR
};

#define XGRAD_OP_KIND_ENTRY(name) OpKind::name,
inline constexpr OpKind kOpKinds[] = {XGRAD_OP_KINDS(XGRAD_OP_KIND_ENTRY)};
#undef XGRAD_OP_KIND_ENTRY
inline constexpr std::size_t kOpKindCount = std::size(kOpKinds);

namespace detail {
#define XGRAD_OP_KIND_NAME(name) #name,
inline constexpr std::string_view kOpNames[] = {XGRAD_OP_KINDS(XGRAD_OP_KIND_NAME)};
#undef XGRAD_OP_KIND_NAME
}  // namespace detail

// The name the op records ("layer_norm").
constexpr std::string_view op_name(OpKind kind) { return detail::kOpNames[static_cast<std::size_t>(kind)]; }

}  // namespace xgrad
