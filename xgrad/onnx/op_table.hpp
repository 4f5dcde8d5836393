// The exporter's op table: for every OpKind the trace records (xgrad/core/op_kinds.hpp), how it is
// written as ONNX nodes, or why it is refused. Keyed by the op's identity, never by its name: a
// kind without a row does not compile (op_table.cpp), and tests/onnx/test_op_table.cpp runs every
// kind through export_model. The rows: op_table.cpp, attention_export.cpp.
#pragma once

#include <xgrad/core/trace.hpp>
#include <xgrad/core/op_kinds.hpp>

namespace xgrad::onnx {

namespace detail {
class Exporter;
}  // namespace detail

struct OpExport {
  OpKind kind;
  // Writes the op (the Exporter's current op) as nodes; null when refused.
  void (*write)(detail::Exporter& ex, const trace::Op& op);
  // Why it is refused ("a loss ..."): null when written.
  const char* refusal;
};

// The row of `kind`.
const OpExport& op_export(OpKind kind);

namespace detail {
// attention_export.cpp
void write_scaled_dot_product_attention(Exporter& ex, const trace::Op& op);
void write_multi_head_attention(Exporter& ex, const trace::Op& op);
}  // namespace detail

}  // namespace xgrad::onnx
