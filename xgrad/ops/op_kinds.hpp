// The identity of every op the trace records (xgrad/core/trace.hpp), as one list: exporters key
// their tables by OpKind (xgrad/onnx/op_table.cpp), never by matching name strings, and a test
// (tests/onnx/test_op_table.cpp) runs every kind's op under a trace and checks that it records
// itself under its kind's name. An op added here needs a row in onnx's table (a compile error until
// it has one) and a sample in that test; an op whose recorded name changes fails that test.
//
//   if (std::optional<OpKind> kind = op_kind(recorded.type)) ...   // nullopt: no op of xgrad's
//   op_name(OpKind::layer_norm)                                    // "layer_norm"
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

// clang-format off
// X(name): the enumerator, and the name the op gives make_result (or trace::Composite).
#define XGRAD_OP_KINDS(X)                                                                                   \
  /* elementwise.cpp */                                                                                     \
  X(add) X(sub) X(mul) X(div) X(rsub) X(rdiv) X(neg) X(pow) X(exp) X(log) X(sqrt) X(abs) X(tanh) X(sigmoid) \
  X(silu) X(relu) X(gelu) X(clamp)                                                                          \
  /* tensor.cpp: Tensor::detach */                                                                          \
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
  /* sampling.cpp */                                                                                        \
  X(tril) X(triu) X(topk) X(sort)                                                                           \
  /* composites: attention.cpp, nn/multihead_attention.cpp */                                               \
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

// The kind of a recorded name; nullopt for a name no op of the list records (a custom
// autograd::Function's node, named after its class).
constexpr std::optional<OpKind> op_kind(std::string_view name) {
  for (OpKind kind : kOpKinds)
    if (op_name(kind) == name) return kind;
  return std::nullopt;
}

}  // namespace xgrad
