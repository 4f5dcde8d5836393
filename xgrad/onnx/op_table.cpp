// The op table (op_table.hpp): one row per OpKind, in the order of XGRAD_OP_KINDS, checked when
// compiling. The rows of the attention composites are in attention_export.cpp.
#include <xgrad/onnx/op_table.hpp>

#include <cmath>
#include <iterator>

#include <xgrad/onnx/exporter.hpp>

namespace xgrad::onnx {

namespace {

using detail::Exporter;
using detail::i64;
using Write = void (*)(Exporter&, const trace::Op&);

// ---- elementwise --------------------------------------------------------------------------------

// One ONNX op on the single input.
template <const char* Type>
void unary(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op(Type, {ex.input(0)}));
}

// Two tensors, or a tensor and the scalar `other` (add(a, s), mul(a, s)).
template <const char* Type>
void binary(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  if (op.inputs.size() == 2) return ex.set_output(0, gb.op(Type, {ex.input(0), ex.input(1)}));
  ex.set_output(0, gb.op(Type, {ex.input(0), ex.scalar("other")}));
}

// The scalar `other` first: rsub(a, s) = s - a, rdiv(a, s) = s / a.
template <const char* Type>
void reversed(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op(Type, {ex.scalar("other"), ex.input(0)}));
}

constexpr char kAdd[] = "Add", kSub[] = "Sub", kMul[] = "Mul", kDiv[] = "Div", kNeg[] = "Neg", kExp[] = "Exp",
               kLog[] = "Log", kSqrt[] = "Sqrt", kAbs[] = "Abs", kTanh[] = "Tanh", kSigmoid[] = "Sigmoid",
               kRelu[] = "Relu", kIdentity[] = "Identity";

void pow(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op("Pow", {ex.input(0), ex.scalar("exponent")}));
}

void clamp(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op("Clip", {ex.input(0), ex.scalar("min"), ex.scalar("max")}));
}

void silu(Exporter& ex, const trace::Op&) {
  GraphBuilder& gb = ex.builder();
  const std::string x = ex.input(0);
  ex.set_output(0, gb.op("Mul", {x, gb.op("Sigmoid", {x})}));
}

// Opset 17 has no Gelu: the formulas of F.gelu, spelled out.
void gelu(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const std::string x = ex.input(0);
  std::string inner;
  if (op.text("approximate") == "tanh") {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const std::string cube = gb.op("Mul", {gb.op("Mul", {x, x}), x});
    const std::string u = gb.op("Add", {x, gb.op("Mul", {cube, gb.scalar(0.044715f)})});
    inner = gb.op("Tanh", {gb.op("Mul", {u, gb.scalar(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
  } else {  // 0.5 x (1 + erf(x / sqrt 2))
    inner = gb.op("Erf", {gb.op("Mul", {x, gb.scalar(static_cast<float>(M_SQRT1_2))})});
  }
  const std::string half_x = gb.op("Mul", {x, gb.scalar(0.5f)});
  ex.set_output(0, gb.op("Mul", {half_x, gb.op("Add", {inner, gb.scalar(1.0f)})}));
}

// ---- reductions ---------------------------------------------------------------------------------

// sum, mean, amax, max (its values): over `dim`, or all when absent.
template <const char* Type>
void reduce(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const bool all = !op.has("dim");
  std::vector<Attribute> attrs{gb.attr("keepdims", all ? i64(0) : op.integer("keepdim"))};
  std::vector<std::string> in{ex.input(0)};
  if (std::string(Type) == "ReduceSum") {  // ReduceSum takes its axes as an input from opset 13
    if (!all) in.push_back(gb.ints(op.integers("dim")));
  } else if (!all) {
    attrs.push_back(gb.attr("axes", op.integers("dim")));
  }
  ex.set_output(0, gb.op(Type, in, attrs));
}

constexpr char kReduceSum[] = "ReduceSum", kReduceMean[] = "ReduceMean", kReduceMax[] = "ReduceMax";

// sum((x - mean)^2) / (n - unbiased), n the count of reduced elements, from the run-time shape
void var(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const std::string x = ex.input(0);
  std::vector<i64> axes;
  if (op.has("dim")) {
    axes = op.integers("dim");
  } else {
    for (i64 d = 0; d < op.inputs[0].dim(); ++d) axes.push_back(d);
  }
  const i64 keep = op.has("dim") ? op.integer("keepdim") : 0;
  const std::string mean = gb.op("ReduceMean", {x}, {gb.attr("axes", axes), gb.attr("keepdims", i64(1))});
  const std::string centered = gb.op("Sub", {x, mean});
  const std::string squares =
      gb.op("ReduceSum", {gb.op("Mul", {centered, centered}), gb.ints(axes)}, {gb.attr("keepdims", keep)});
  const std::string sizes = gb.op("Gather", {gb.op("Shape", {x}), gb.ints(axes)});
  const std::string n = gb.op("Cast", {gb.op("ReduceProd", {sizes}, {gb.attr("keepdims", i64(0))})},
                              {gb.attr("to", i64(pb::TensorProto::FLOAT))});
  const std::string divisor = gb.op("Sub", {n, gb.scalar(op.integer("unbiased") ? 1.0f : 0.0f)});
  ex.set_output(0, gb.op("Div", {squares, divisor}));
}

// ---- shapes -------------------------------------------------------------------------------------

// transpose, permute
void transpose(Exporter& ex, const trace::Op& op) {
  ex.set_output(0, ex.builder().op("Transpose", {ex.input(0)}, {ex.builder().attr("perm", op.integers("perm"))}));
}

// reshape, flatten, unsqueeze, squeeze: Reshape; expand: Expand. The target is the output's shape.
template <const char* Type>
void reshape(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op(Type, {ex.input(0), ex.output_shape_value("target shape")}));
}

constexpr char kReshape[] = "Reshape", kExpand[] = "Expand";

// cat; stack (each input unsqueezed first)
template <bool Stack>
void concat(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  std::vector<std::string> parts;
  for (std::size_t j = 0; j < op.inputs.size(); ++j)
    parts.push_back(Stack ? gb.op("Unsqueeze", {ex.input(j), gb.ints({op.integer("dim")})}) : ex.input(j));
  ex.set_output(0, gb.op("Concat", parts, {gb.attr("axis", op.integer("dim"))}));
}

// narrow, slice
void slice(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  auto ends = [&](bool resized) {
    return ex.int_arg("start", resized) + (ex.int_arg("length", resized) - 1) * ex.int_arg("step", resized) + 1;
  };
  const std::string starts = ex.sizes({ex.int_arg("start", false)}, {ex.int_arg("start", true)}, "start");
  const std::string stops = ex.int_arg("length", false) == 0 ? starts : ex.sizes({ends(false)}, {ends(true)}, "end");
  ex.set_output(
      0, gb.op("Slice", {ex.input(0), starts, stops, gb.ints({op.integer("dim")}), gb.ints({op.integer("step")})}));
}

// ---- indexing -----------------------------------------------------------------------------------

void index_select(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  ex.set_output(0, gb.op("Gather", {ex.input(0), ex.array_value("index")}, {gb.attr("axis", op.integer("dim"))}));
}

void embedding(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op("Gather", {ex.input(0), ex.array_value("indices")}));
}

void masked_fill(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op("Where", {ex.array_value("mask"), ex.scalar("value"), ex.input(0)}));
}

void where(Exporter& ex, const trace::Op&) {
  ex.set_output(0, ex.builder().op("Where", {ex.array_value("condition"), ex.input(0), ex.input(1)}));
}

// ---- matrices, softmax, norms, triangles --------------------------------------------------------

void matmul(Exporter& ex, const trace::Op&) { ex.set_output(0, ex.builder().op("MatMul", {ex.input(0), ex.input(1)})); }

// x (*, in) W^T (in, out) + b: the weight stays as stored, (out, in), under its state_dict key.
void linear(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const std::string w_t = gb.op("Transpose", {ex.input(1)}, {gb.attr("perm", std::vector<i64>{1, 0})});
  std::string y = gb.op("MatMul", {ex.input(0), w_t});
  if (op.inputs.size() == 3) y = gb.op("Add", {y, ex.input(2)});
  ex.set_output(0, y);
}

template <const char* Type>
void softmax(Exporter& ex, const trace::Op& op) {
  ex.set_output(0, ex.builder().op(Type, {ex.input(0)}, {ex.builder().attr("axis", op.integer("dim"))}));
}

constexpr char kSoftmax[] = "Softmax", kLogSoftmax[] = "LogSoftmax";

void layer_norm(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const i64 nd = op.integer("normalized_dims");
  const bool has_weight = op.integer("has_weight") != 0;
  std::vector<std::string> in{ex.input(0)};
  if (has_weight) {
    in.push_back(ex.input(1));
  } else {  // LayerNormalization needs a scale: ones of the normalized shape
    const Shape xs = op.inputs[0].shape();
    in.push_back(gb.constant(full_array<float>(Shape(xs.end() - nd, xs.end()), 1.0f, "onnx::export_model"), "ones"));
  }
  if (op.inputs.size() > (has_weight ? 2u : 1u)) in.push_back(ex.input(has_weight ? 2 : 1));
  ex.set_output(0, gb.op("LayerNormalization", in,
                         {gb.attr("axis", -nd), gb.attr("epsilon", static_cast<float>(op.real("eps")))}));
}

// Opset 17 has no RMSNormalization (opset 23 does): x / sqrt(mean(x^2) + eps) [* weight], spelled
// out over the trailing normalized dims; eps is the one the op resolved (finfo(dtype).eps by default).
void rms_norm(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const std::string x = ex.input(0);
  std::vector<i64> axes;
  for (i64 d = -op.integer("normalized_dims"); d < 0; ++d) axes.push_back(d);
  const std::string mean_sq =
      gb.op("ReduceMean", {gb.op("Mul", {x, x})}, {gb.attr("axes", axes), gb.attr("keepdims", i64(1))});
  const std::string rms = gb.op("Sqrt", {gb.op("Add", {mean_sq, gb.scalar(static_cast<float>(op.real("eps")))})});
  const std::string y = gb.op("Div", {x, rms});
  ex.set_output(0, op.integer("has_weight") != 0 ? gb.op("Mul", {y, ex.input(1)}) : y);
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = Concat(-x[..., h:], x[..., :h]) with h = D/2
// of the recorded x (D, the head dim, is fixed by the model); cos and sin as recorded.
void rotary_embedding(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  const std::string x = ex.input(0);
  const i64 h = static_cast<i64>(op.inputs[0].shape().back() / 2);
  const auto half = [&](i64 start, i64 end) {
    return gb.op("Slice", {x, gb.ints({start}), gb.ints({end}), gb.ints({-1})});
  };
  const std::string rotated = gb.op("Concat", {gb.op("Neg", {half(h, 2 * h)}), half(0, h)}, {gb.attr("axis", i64(-1))});
  ex.set_output(0, gb.op("Add", {gb.op("Mul", {x, ex.input(1)}), gb.op("Mul", {rotated, ex.input(2)})}));
}

// Trilu keeps j - i <= k (upper = 0) or j - i >= k (upper = 1)
template <bool Upper>
void trilu(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  ex.set_output(0,
                gb.op("Trilu", {ex.input(0), gb.scalar_int(op.integer("diagonal"))}, {gb.attr("upper", i64(Upper))}));
}

// ---- the table ----------------------------------------------------------------------------------

constexpr OpExport written(OpKind kind, Write write) { return {kind, write, nullptr}; }
constexpr OpExport refused(OpKind kind, const char* why) { return {kind, nullptr, why}; }

constexpr OpExport kTable[] = {
    written(OpKind::add, binary<kAdd>),
    written(OpKind::sub, binary<kSub>),
    written(OpKind::mul, binary<kMul>),
    written(OpKind::div, binary<kDiv>),
    written(OpKind::rsub, reversed<kSub>),
    written(OpKind::rdiv, reversed<kDiv>),
    written(OpKind::neg, unary<kNeg>),
    written(OpKind::pow, pow),
    written(OpKind::exp, unary<kExp>),
    written(OpKind::log, unary<kLog>),
    written(OpKind::sqrt, unary<kSqrt>),
    written(OpKind::abs, unary<kAbs>),
    written(OpKind::tanh, unary<kTanh>),
    written(OpKind::sigmoid, unary<kSigmoid>),
    written(OpKind::silu, silu),
    written(OpKind::relu, unary<kRelu>),
    written(OpKind::gelu, gelu),
    written(OpKind::clamp, clamp),
    written(OpKind::detach, unary<kIdentity>),  // as torch.onnx exports it
    written(OpKind::sum, reduce<kReduceSum>),
    written(OpKind::mean, reduce<kReduceMean>),
    written(OpKind::var, var),
    written(OpKind::amax, reduce<kReduceMax>),
    written(OpKind::max, reduce<kReduceMax>),
    written(OpKind::transpose, transpose),
    written(OpKind::permute, transpose),
    written(OpKind::reshape, reshape<kReshape>),
    written(OpKind::flatten, reshape<kReshape>),
    written(OpKind::unsqueeze, reshape<kReshape>),
    written(OpKind::squeeze, reshape<kReshape>),
    written(OpKind::expand, reshape<kExpand>),
    written(OpKind::cat, concat<false>),
    written(OpKind::stack, concat<true>),
    written(OpKind::narrow, slice),
    written(OpKind::slice, slice),
    written(OpKind::index_select, index_select),
    written(OpKind::embedding, embedding),
    written(OpKind::masked_fill, masked_fill),
    written(OpKind::where, where),
    written(OpKind::matmul, matmul),
    written(OpKind::linear, linear),
    written(OpKind::softmax, softmax<kSoftmax>),
    written(OpKind::log_softmax, softmax<kLogSoftmax>),
    written(OpKind::layer_norm, layer_norm),
    refused(OpKind::dropout,
            "dropout records itself only when it drops (training=true and p > 0): export_model "
            "puts the modules in eval mode, so this one is called with training=true"),
    refused(OpKind::mse_loss, "a loss, computed in training; export the model's forward without it"),
    refused(OpKind::cross_entropy, "a loss, computed in training; export the model's forward without it"),
    written(OpKind::rms_norm, rms_norm),
    written(OpKind::rotary_embedding, rotary_embedding),
    written(OpKind::tril, trilu<false>),
    written(OpKind::triu, trilu<true>),
    refused(OpKind::topk, "its indices are an index array, which the recording cannot follow"),
    refused(OpKind::sort, "its indices are an index array, which the recording cannot follow"),
    written(OpKind::scaled_dot_product_attention, detail::write_scaled_dot_product_attention),
    written(OpKind::multi_head_attention, detail::write_multi_head_attention),
};

static_assert(std::size(kTable) == kOpKindCount,
              "onnx's op table needs one row per OpKind (xgrad/core/op_kinds.hpp): written or refused");

// Each row has a writer or a refusal, not both: written() and refused() make every row. (Their
// pointers are not compared here: GCC under -fsanitize does not fold a function's address to a
// constant; OnnxOpTable.EveryOpKindExportsOrIsRefusedByName checks every row at run time.)
constexpr bool rows_follow_the_kinds() {
  for (std::size_t i = 0; i < kOpKindCount; ++i)
    if (kTable[i].kind != kOpKinds[i]) return false;
  return true;
}
static_assert(rows_follow_the_kinds(), "onnx's op table: row i is OpKind i (the order of XGRAD_OP_KINDS)");

}  // namespace

const OpExport& op_export(OpKind kind) { return kTable[static_cast<std::size_t>(kind)]; }

}  // namespace xgrad::onnx
