// The rows of the attention composites in the op table (op_table.hpp): scaled_dot_product_attention
// and nn::MultiheadAttention, each recorded as one op (trace::Composite), written as MatMul and
// Softmax with their masks; grouped-query attention (enable_gqa) repeats the key/value heads first.
#include <xgrad/onnx/op_table.hpp>

#include <cmath>
#include <limits>

#include <xgrad/onnx/exporter.hpp>

namespace xgrad::onnx::detail {

namespace {

// softmax(scale q k^T + masks) v for q (.., L, d), k (.., S, d), v (.., S, dv) of rank `rank`; masks:
// (value, is_bool), bool true = may not attend. Returns the output and the probabilities.
std::pair<std::string, std::string> attend(GraphBuilder& gb, const std::string& q, const std::string& k,
                                           const std::string& v, std::size_t rank, double scale,
                                           const std::vector<std::pair<std::string, bool>>& masks, bool causal) {
  std::vector<i64> perm(rank);
  for (std::size_t d = 0; d < rank; ++d) perm[d] = static_cast<i64>(d);
  std::swap(perm[rank - 1], perm[rank - 2]);
  std::string logits = gb.op("MatMul", {q, gb.op("Transpose", {k}, {gb.attr("perm", perm)})});
  logits = gb.op("Mul", {logits, gb.scalar(static_cast<float>(scale))});
  std::string blocked;  // bool: true = may not attend
  auto block = [&](const std::string& m) { blocked = blocked.empty() ? m : gb.op("Or", {blocked, m}); };
  for (const auto& [m, is_bool] : masks) {
    if (is_bool)
      block(m);
    else
      logits = gb.op("Add", {logits, m});
  }
  if (causal) {  // key j > query i, for the run-time L and S
    auto positions = [&](const std::string& t) {
      const std::string n = gb.op("Squeeze", {gb.shape(t, -2, -1), gb.ints({0})});
      return gb.op("Range", {gb.scalar_int(0), n, gb.scalar_int(1)});
    };
    const std::string rows = gb.op("Unsqueeze", {positions(q), gb.ints({1})});  // (L, 1)
    const std::string cols = gb.op("Unsqueeze", {positions(k), gb.ints({0})});  // (1, S)
    block(gb.op("Greater", {cols, rows}));
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (!blocked.empty()) logits = gb.op("Where", {blocked, gb.scalar(neg_inf), logits});
  std::string probs = gb.op("Softmax", {logits}, {gb.attr("axis", i64(-1))});
  if (!masks.empty()) {
    // A query whose keys are all masked attends to nothing (xgrad's zero output), not NaN.
    const std::string row_max =
        gb.op("ReduceMax", {logits}, {gb.attr("axes", std::vector<i64>{-1}), gb.attr("keepdims", i64(1))});
    const std::string dead = gb.op("IsInf", {row_max}, {gb.attr("detect_positive", i64(0))});
    probs = gb.op("Where", {dead, gb.scalar(0.0f), probs});
  }
  return {gb.op("MatMul", {probs, v}), probs};
}

// Grouped-query attention: x (.., Hkv, S, d) of rank `rank` -> (.., Hkv G, S, d), each head repeated G
// times in place (repeat_interleave along dim -3, transformers' repeat_kv): Unsqueeze to
// (.., Hkv, 1, S, d), Expand to (.., Hkv, G, S, d), Reshape with the run-time leading dims and S.
std::string repeat_kv(GraphBuilder& gb, const std::string& x, std::size_t rank, i64 heads, i64 G) {
  if (G == 1) return x;
  const i64 r = static_cast<i64>(rank);
  std::vector<i64> expand(rank + 1, 1);
  expand[rank - 2] = G;
  const std::string repeated = gb.op("Expand", {gb.op("Unsqueeze", {x, gb.ints({r - 2})}), gb.ints(expand)});
  const std::string shape =
      gb.op("Concat", {gb.shape(x, 0, r - 3), gb.ints({heads * G}), gb.shape(x, r - 2, r)}, {gb.attr("axis", i64(0))});
  return gb.op("Reshape", {repeated, shape});
}

}  // namespace

void write_scaled_dot_product_attention(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  XGRAD_CHECK(op.real("dropout_p") == 0.0, kWho, ": ", ex.where(), " has dropout_p ", op.real("dropout_p"),
              "; export a model whose attention has no dropout in eval mode");
  const Shape qs = op.inputs[0].shape();
  const double scale = op.has("scale") ? op.real("scale") : 1.0 / std::sqrt(static_cast<double>(qs.back()));
  std::vector<std::pair<std::string, bool>> masks;
  if (op.has("attn_mask"))
    masks.emplace_back(ex.array_value("attn_mask"), std::holds_alternative<BoolArray>(op.arg("attn_mask").value));
  std::string q = ex.input(0), k = ex.input(1), v = ex.input(2);
  if (op.integer("enable_gqa") != 0 && qs.size() >= 3) {  // k and v: Hkv heads at dim -3, q: G times as many
    const std::size_t r = qs.size();
    const i64 heads = static_cast<i64>(op.inputs[1].shape()[r - 3]), G = static_cast<i64>(qs[r - 3]) / heads;
    k = repeat_kv(gb, k, r, heads, G);
    v = repeat_kv(gb, v, r, heads, G);
  }
  const auto [out, probs] = attend(gb, q, k, v, qs.size(), scale, masks, op.integer("is_causal") != 0);
  ex.set_output(0, out);
}

void write_multi_head_attention(Exporter& ex, const trace::Op& op) {
  GraphBuilder& gb = ex.builder();
  // inputs: query, key, value, in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  XGRAD_CHECK(op.real("dropout_p") == 0.0, kWho, ": ", ex.where(), " has dropout_p ", op.real("dropout_p"));
  const Shape qs = op.inputs[0].shape();
  const bool unbatched = qs.size() == 2, batch_first = op.integer("batch_first") != 0 || unbatched;
  const i64 E = static_cast<i64>(qs.back()), H = op.integer("num_heads"), d = E / H;
  const bool has_bias = op.inputs[4].defined();

  // (N, len, E) for every layout
  auto to_batch_first = [&](std::size_t j) {
    std::string x = ex.input(j);
    if (unbatched) return gb.op("Unsqueeze", {x, gb.ints({0})});
    if (!batch_first) x = gb.op("Transpose", {x}, {gb.attr("perm", std::vector<i64>{1, 0, 2})});
    return x;
  };
  const std::string q_in = to_batch_first(0);
  const std::string k_in = op.inputs[1].same(op.inputs[0]) ? q_in : to_batch_first(1);
  const std::string v_in = op.inputs[2].same(op.inputs[1]) ? k_in : to_batch_first(2);

  // W^T (E, 3E) split into the q, k and v blocks; likewise the bias.
  const std::string w_t = gb.op("Transpose", {ex.input(3)}, {gb.attr("perm", std::vector<i64>{1, 0})});
  const std::vector<std::string> w = gb.ops("Split", {w_t, gb.ints({E, E, E})}, 3, {gb.attr("axis", i64(1))});
  std::vector<std::string> b;
  if (has_bias) b = gb.ops("Split", {ex.input(4), gb.ints({E, E, E})}, 3, {gb.attr("axis", i64(0))});
  // (N, len, E) -> heads (N, H, len, d)
  auto project = [&](const std::string& x, std::size_t part) {
    std::string y = gb.op("MatMul", {x, w[part]});
    if (has_bias) y = gb.op("Add", {y, b[part]});
    y = gb.op("Reshape", {y, gb.ints({0, 0, H, d})});
    return gb.op("Transpose", {y}, {gb.attr("perm", std::vector<i64>{0, 2, 1, 3})});
  };
  const std::string q = project(q_in, 0), k = project(k_in, 1), v = project(v_in, 2);

  // Masks, as (N, H, L, S)-broadcastable values: attn_mask (L, S) as is or (N H, L, S) split
  // into (N, H, L, S); key_padding_mask (N, S) as (N, 1, 1, S), (S) as is.
  std::vector<std::pair<std::string, bool>> masks;
  if (op.has("attn_mask")) {
    std::string m = ex.array_value("attn_mask");
    const trace::Arg& arg = op.arg("attn_mask");
    const bool is_bool = std::holds_alternative<BoolArray>(arg.value);
    const std::size_t rank =
        is_bool ? std::get<BoolArray>(arg.value).dimension() : std::get<Array<float>>(arg.value).dimension();
    if (rank == 3)
      m = gb.op("Reshape", {m, gb.op("Concat", {gb.ints({-1, H}), gb.shape(m, 1, 3)}, {gb.attr("axis", i64(0))})});
    masks.emplace_back(m, is_bool);
  }
  if (op.has("key_padding_mask")) {
    std::string m = ex.array_value("key_padding_mask");
    if (!unbatched) m = gb.op("Unsqueeze", {m, gb.ints({1, 2})});
    masks.emplace_back(m, std::holds_alternative<BoolArray>(op.arg("key_padding_mask").value));
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto [o, probs] = attend(gb, q, k, v, 4, scale, masks, op.integer("is_causal") != 0);

  // heads (N, H, L, d) -> (N, L, E) -> out_proj, back to the input's layout
  std::string out = gb.op("Transpose", {o}, {gb.attr("perm", std::vector<i64>{0, 2, 1, 3})});
  out = gb.op("Reshape", {out, gb.ints({0, 0, E})});
  out = gb.op("MatMul", {out, gb.op("Transpose", {ex.input(5)}, {gb.attr("perm", std::vector<i64>{1, 0})})});
  if (op.inputs[6].defined()) out = gb.op("Add", {out, ex.input(6)});
  if (unbatched)
    out = gb.op("Squeeze", {out, gb.ints({0})});
  else if (!batch_first)
    out = gb.op("Transpose", {out}, {gb.attr("perm", std::vector<i64>{1, 0, 2})});
  ex.set_output(0, out);
  if (op.outputs.size() > 1 && op.outputs[1].defined()) {
    std::string weights = probs;  // (N, H, L, S)
    if (op.integer("average_attn_weights") != 0)
      weights = gb.op("ReduceMean", {weights}, {gb.attr("axes", std::vector<i64>{1}), gb.attr("keepdims", i64(0))});
    if (unbatched) weights = gb.op("Squeeze", {weights, gb.ints({0})});
    ex.set_output(1, weights);
  }
}

}  // namespace xgrad::onnx::detail
