// Exports small models of every kind onnx::export_model covers, for check_onnx_models.py (onnx's
// checker) and check_onnx_runtime.cjs (ONNX Runtime). For each case, DIR/<case>.onnx and
// DIR/<case>.json: the inputs and xgrad's own outputs (eval mode) at three sizes of every dynamic
// axis, the first being the example the model was exported with.
//
// Besides the written cases, random_00 ... random_29: random forwards (a property test, a fixed
// seed per case) chaining modules and ops over (batch, seq, 8) values with random masks and
// dynamic axes; the program of each is printed beside its name, to reproduce a failure.
// Every op kind the exporter writes must be run by some case (checked at the end).
//
//   xgrad_onnx_export_cases DIR [RANDOM_CASES]     (30 random cases unless told; CI runs 30)
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/models/gpt.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/nn/rms_norm.hpp>
#include <xgrad/ops/ops.hpp>
#include <xgrad/onnx/export.hpp>
#include <xgrad/onnx/op_table.hpp>

using namespace xgrad;
using onnx::Input;
using Json = nlohmann::json;
using i64 = std::int64_t;

namespace {

// One input: its name, kind and dims, each a size ("8") or a dynamic axis ("batch").
struct InputSpec {
  enum Kind { Float, Index, Bool } kind;
  std::string name;
  std::vector<std::string> dims;
  i64 high = 0;  // Index: values in [0, high)
};

using Sizes = std::map<std::string, i64>;

struct Case {
  std::string name;
  std::shared_ptr<nn::Module<float>> module;
  onnx::Forward forward;
  std::vector<InputSpec> inputs;
  std::vector<std::string> outputs;
  std::vector<Sizes> runs;  // runs[0]: the export example
  std::function<void(std::vector<Input>&)> adjust = nullptr;  // e.g. a fully masked row
  std::string about = "";  // printed after the name (the random cases' programs)
};

Shape shape_at(const InputSpec& spec, const Sizes& sizes) {
  Shape s;
  for (const std::string& d : spec.dims) s.push_back(std::isdigit(d[0]) ? std::stoul(d) : sizes.at(d));
  return s;
}

std::vector<Input> make_inputs(const Case& c, const Sizes& sizes, std::mt19937& rng) {
  std::vector<Input> in;
  for (const InputSpec& spec : c.inputs) {
    const Shape s = shape_at(spec, sizes);
    if (spec.kind == InputSpec::Float) {
      std::normal_distribution<float> normal;
      Array<float> v = Array<float>::from_shape(s);
      for (float& x : v) x = normal(rng);
      in.emplace_back(Tensor<float>(std::move(v)));
    } else if (spec.kind == InputSpec::Index) {
      std::uniform_int_distribution<i64> pick(0, spec.high - 1);
      IndexArray v = IndexArray::from_shape(s);
      for (i64& x : v) x = pick(rng);
      in.emplace_back(std::move(v));
    } else {
      std::bernoulli_distribution masked(0.3);
      BoolArray v = BoolArray::from_shape(s);
      for (auto&& x : v) x = masked(rng);
      in.emplace_back(std::move(v));
    }
  }
  if (c.adjust) c.adjust(in);
  return in;
}

Json to_json(const Input& in) {
  Json j;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, Tensor<float>>) {
          j["type"] = "float32";
          j["dims"] = v.shape();
          j["data"] = std::vector<float>(v.value().begin(), v.value().end());
        } else {
          j["type"] = std::is_same_v<V, IndexArray> ? "int64" : "bool";
          j["dims"] = Shape(v.shape().begin(), v.shape().end());
          j["data"] = std::vector<typename V::value_type>(v.begin(), v.end());
        }
      },
      in);
  return j;
}

// `covered`: the op kinds the case runs, recorded on the export example.
void write_case(const Case& c, const std::string& dir, std::set<OpKind>& covered) {
  std::mt19937 rng(7);
  onnx::DynamicAxes dynamic;
  std::vector<std::string> names;
  for (const InputSpec& spec : c.inputs) {
    names.push_back(spec.name);
    for (std::size_t d = 0; d < spec.dims.size(); ++d)
      if (!std::isdigit(spec.dims[d][0])) dynamic[spec.name][static_cast<i64>(d)] = spec.dims[d];
  }
  Json runs = Json::array();
  for (std::size_t r = 0; r < c.runs.size(); ++r) {
    const std::vector<Input> in = make_inputs(c, c.runs[r], rng);
    if (r == 0)
      onnx::export_model(*c.module, c.forward, in, dir + "/" + c.name + ".onnx",
                         onnx::ExportOptions().input_names(names).output_names(c.outputs).dynamic_axes(dynamic));
    c.module->eval();
    NoGradGuard no_grad;
    std::vector<Tensor<float>> out;
    if (r == 0) {
      trace::Recorder recorder;
      out = c.forward(onnx::Inputs(in));
      for (const trace::Op& op : recorder.ops())
        if (op.kind) covered.insert(*op.kind);
    } else {
      out = c.forward(onnx::Inputs(in));
    }
    Json run;
    for (std::size_t k = 0; k < in.size(); ++k) run["inputs"][names[k]] = to_json(in[k]);
    for (std::size_t k = 0; k < out.size(); ++k) run["outputs"][c.outputs[k]] = to_json(out[k]);
    runs.push_back(run);
  }
  std::ofstream(dir + "/" + c.name + ".json") << Json{{"model", c.name + ".onnx"}, {"runs", runs}}.dump();
}

// Every elementwise, reduction and shape op in one forward: x (batch, seq, 8).
class OpsNet : public nn::Module<float> {
 public:
  OpsNet() : Module("OpsNet") {
    norm = register_module("norm", std::make_shared<nn::LayerNorm<float>>(8));
    scale = register_parameter("scale", randn<float>({8}));
    register_buffer("offset", randn<float>({1, 8}));
  }
  std::vector<Tensor<float>> run(const Tensor<float>& x) {
    const Tensor<float> offset = named_buffers()[0].second;
    const Tensor<float> h = norm->forward(x) * scale + offset;  // (B, L, 8)
    const Tensor<float> pos = abs(h.detach()) + 1.0f;           // detach: Identity
    const Tensor<float> pointwise = exp(h) - tanh(h) * sigmoid(h) + silu(h) / pos + sqrt(pos) - log(pos) +
                                    pow(h, 2.0f) + pow(pos, 1.5f) + clamp<float>(h, -0.5f, 0.5f) + relu(-h) +
                                    (2.0f - h) + 3.0f / pos + gelu(h, "tanh");
    const Tensor<float> cat2 = cat(std::vector<Tensor<float>>{h, softmax(h, -1)}, -1);  // (B, L, 16)
    const Tensor<float> sliced = narrow(cat2, 2, 4, 8) + slice(cat2, 2, 1, 16, 2);       // (B, L, 8)
    const Tensor<float> flat = reshape(sliced, {x.size(0) * x.size(1), 8});               // (B L, 8)
    const Tensor<float> back = view(flat, {x.size(0), x.size(1), 8});
    const Tensor<float> gram = matmul(back, transpose(h, 1, 2));                            // (B, L, L)
    const Tensor<float> reduced = sum(h, {-1}, true) + mean(h, {1}, true) + amax(h, {2}, true) +
                                   var(h, {2}, true, true) + max(h, 2, true).first;  // (B, L, 1)
    const Tensor<float> expanded = expand(reduced, {-1, -1, 8});
    const Tensor<float> stacked = stack(std::vector<Tensor<float>>{expanded, log_softmax(h, 1)}, 0);  // (2, B, L, 8)
    const Tensor<float> moved = squeeze(unsqueeze(permute(stacked, {1, 2, 0, 3}), 0), 0);         // (B, L, 2, 8)
    const Tensor<float> flattened = flatten(moved, 2);                                             // (B, L, 16)
    BoolArray every_other = BoolArray::from_shape({16});
    for (std::size_t i = 0; i < 16; ++i) every_other(i) = i % 2 == 0;
    const Tensor<float> filled = masked_fill(flattened, every_other, -1.0f);
    const Tensor<float> picked = index_select(filled, 2, IndexArray({0, 3, 5}));
    const Tensor<float> chosen = xgrad::where(BoolArray({true, false, true}), picked, -picked);
    return {pointwise, tril(gram, -1) + 2.0f * triu(gram, 1), chosen, sum(h) + mean(h) + max(h) + var(h, false) + sum(var(h, {0, 1}))};
  }
  std::shared_ptr<nn::LayerNorm<float>> norm;
  Tensor<float> scale;
};

// Token and position embeddings; the positions 0..L-1 are made in the forward (Range in ONNX).
class Embedder : public nn::Module<float> {
 public:
  Embedder() : Module("Embedder") {
    tok = register_module("tok", std::make_shared<nn::Embedding<float>>(12, 8));
    pos = register_module("pos", std::make_shared<nn::Embedding<float>>(16, 8));
    head = register_module("head", std::make_shared<nn::Linear<float>>(8, 12));
  }
  std::shared_ptr<nn::Embedding<float>> tok, pos;
  std::shared_ptr<nn::Linear<float>> head;
};

std::shared_ptr<nn::MultiheadAttention<float>> mha(bool batch_first) {
  return std::make_shared<nn::MultiheadAttention<float>>(
      nn::MultiheadAttentionOptions(8, 2).batch_first(batch_first).dropout(0.1));
}

InputSpec tensor(std::string name, std::vector<std::string> dims) { return {InputSpec::Float, name, dims}; }
InputSpec mask(std::string name, std::vector<std::string> dims) { return {InputSpec::Bool, name, dims}; }

const std::vector<Sizes> kBatchSeq = {
    {{"batch", 2}, {"seq", 5}}, {{"batch", 3}, {"seq", 7}}, {{"batch", 1}, {"seq", 2}}};

// ---- random forwards (the property test) ------------------------------------------------------

constexpr i64 kE = 8;  // the width of every value of a random forward
// Normalizations use a large eps: a value with almost no variance (log_softmax of a softmax) would
// otherwise turn float rounding into differences beyond the comparison's tolerance.

// A random forward over x (batch, seq, 8) and the masks it was given: a chain of steps, each
// reading one or two earlier values (all (batch, seq, 8), x being value 0) and adding one; the
// outputs are the last value and, sometimes, an earlier one or attention weights.
class RandomNet : public nn::Module<float> {
 public:
  enum Kind {
    kLinear, kLayerNorm, kGelu, kGeluTanh, kRelu, kTanh, kSigmoid, kSilu, kAdd, kSub, kMulTanh, kScale,
    kCenter, kSplitHeads, kFlattenLinear, kSeqSoftmax, kSoftmax, kLogSoftmax, kPermute, kCatNarrow, kDetach,
    kAttention, kSdpa, kVarNorm, kStackSum, kMaskedFill, kTril, kUnsqueezeExpand, kKinds
  };
  struct Step {
    Kind kind;
    std::size_t a = 0, b = 0;      // the values read
    std::shared_ptr<nn::Module<float>> module;
    float scalar = 1.0f;
    i64 offset = 0;                // kCatNarrow: where the narrowed part starts
    bool key_padding = false, attn_bool = false, attn_float = false, causal = false, weights = false;
    bool average = true;
  };
  // inputs: x, then the masks present: key padding (batch, seq) bool, attention (seq, seq) bool,
  // attention (seq, seq) float
  bool has_kpm = false, has_bool_mask = false, has_float_mask = false;
  std::vector<Step> steps;
  std::size_t extra_output = 0;  // 0: none, else 1 + the value given as a second output

  RandomNet() : Module("RandomNet") {}

  std::vector<Tensor<float>> run(const onnx::Inputs& in) {
    std::vector<Tensor<float>> v{in.tensor(0)};
    std::size_t next = 1;
    AttnMask<float> kpm, bool_mask, float_mask;
    if (has_kpm) kpm = in.mask(next++);
    if (has_bool_mask) bool_mask = in.mask(next++);
    if (has_float_mask) float_mask = in.tensor(next++).value();
    std::vector<Tensor<float>> weights;
    for (const Step& st : steps) {
      const Tensor<float>& a = v[st.a];
      const Tensor<float>& b = v[st.b];
      const i64 B = a.size(0), L = a.size(1);
      switch (st.kind) {
        case kLinear: case kLayerNorm: v.push_back(st.module->forward(a)); break;
        case kGelu: v.push_back(gelu(a)); break;
        case kGeluTanh: v.push_back(gelu(a, "tanh")); break;
        case kRelu: v.push_back(relu(a)); break;
        case kTanh: v.push_back(tanh(a)); break;
        case kSigmoid: v.push_back(sigmoid(a)); break;
        case kSilu: v.push_back(silu(a)); break;
        case kAdd: v.push_back(a + b); break;
        case kSub: v.push_back(a - b); break;
        case kMulTanh: v.push_back(a * tanh(b)); break;
        case kScale: v.push_back(a * st.scalar + 0.5f); break;
        case kCenter: v.push_back(a - mean(a, {-1}, true) + amax(b, {1}, true)); break;
        case kSplitHeads:  // (B, L, 2, 4) -> (B, L, 4, 2) -> (B, L, 8)
          v.push_back(reshape(transpose(reshape(a, {B, L, 2, kE / 2}), 2, 3), {B, L, kE}));
          break;
        case kFlattenLinear: v.push_back(view(st.module->forward(reshape(a, {B * L, kE})), {B, L, kE})); break;
        case kSeqSoftmax: v.push_back(transpose(softmax(transpose(a, 1, 2), -1), 1, 2)); break;
        case kSoftmax: v.push_back(softmax(a, -1)); break;
        case kLogSoftmax: v.push_back(log_softmax(a, 1)); break;
        case kPermute: v.push_back(permute(permute(a, {1, 0, 2}) * st.scalar, {1, 0, 2})); break;
        case kCatNarrow: v.push_back(narrow(cat(std::vector<Tensor<float>>{a, b}, -1), 2, st.offset, kE)); break;
        case kDetach: v.push_back(a.detach()); break;
        case kAttention: {
          auto& mha = static_cast<nn::MultiheadAttention<float>&>(*st.module);
          const AttnMask<float>& attn = st.attn_bool ? bool_mask : st.attn_float ? float_mask : AttnMask<float>();
          auto [y, w] = mha.forward(a, b, b, st.key_padding ? kpm : AttnMask<float>(), st.weights, attn,
                                    st.average, st.causal);
          v.push_back(y);
          if (st.weights) weights.push_back(w);
          break;
        }
        case kSdpa:
          v.push_back(scaled_dot_product_attention(a, b, b, st.attn_bool ? bool_mask : AttnMask<float>(), 0.0,
                                                   st.causal));
          break;
        case kVarNorm: v.push_back((a - mean(a, {-1}, true)) / sqrt(var(a, {-1}, st.average, true) + 0.1f)); break;
        case kStackSum: v.push_back(sum(stack(std::vector<Tensor<float>>{a, b}, 1), {1})); break;
        case kMaskedFill: {
          BoolArray pattern = BoolArray::from_shape({static_cast<std::size_t>(kE)});
          for (i64 e = 0; e < kE; ++e) pattern(static_cast<std::size_t>(e)) = (e + st.offset) % 3 == 0;
          v.push_back(masked_fill(a, pattern, st.scalar));
          break;
        }
        case kTril: v.push_back(tril(a, st.offset - kE / 2)); break;
        case kUnsqueezeExpand:  // the mean over features, broadcast back: (B, L, 1, 1) -> (B, L, 1, 8) -> (B, L, 8)
          v.push_back(b + squeeze(expand(unsqueeze(mean(a, {-1}, true), 2), {-1, -1, 1, kE}), 2));
          break;
        case kKinds: break;
      }
    }
    std::vector<Tensor<float>> out{v.back()};
    if (extra_output > 0) out.push_back(v[extra_output - 1]);
    if (!weights.empty()) out.push_back(weights.front());
    return out;
  }
};

const char* kind_name(RandomNet::Kind k) {
  static const char* names[] = {"linear", "layer_norm", "gelu", "gelu_tanh", "relu", "tanh", "sigmoid", "silu",
                                "add", "sub", "mul_tanh", "scale", "center", "split_heads", "flatten_linear",
                                "seq_softmax", "softmax", "log_softmax", "permute", "cat_narrow", "detach",
                                "attention", "sdpa", "var_norm", "stack_sum", "masked_fill", "tril",
                                "unsqueeze_expand"};
  return names[k];
}

Case random_case(int index) {
  std::mt19937 rng(29000 + index);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  auto coin = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  auto m = std::make_shared<RandomNet>();
  m->has_kpm = coin(0.4), m->has_bool_mask = coin(0.4), m->has_float_mask = coin(0.3);
  std::ostringstream about;
  const int n_steps = 3 + pick(6);
  for (int i = 0; i < n_steps; ++i) {
    RandomNet::Step st;
    st.kind = static_cast<RandomNet::Kind>(pick(RandomNet::kKinds));
    const std::size_t have = static_cast<std::size_t>(i) + 1;  // values so far
    st.a = coin(0.6) ? have - 1 : static_cast<std::size_t>(pick(static_cast<int>(have)));
    st.b = static_cast<std::size_t>(pick(static_cast<int>(have)));
    st.scalar = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    st.offset = pick(static_cast<int>(kE) + 1);
    const std::string key = "step" + std::to_string(i);
    switch (st.kind) {
      case RandomNet::kLinear: case RandomNet::kFlattenLinear:
        st.module = m->register_module(key, std::make_shared<nn::Linear<float>>(
                                                nn::LinearOptions(kE, kE).bias(coin(0.7))));
        break;
      case RandomNet::kLayerNorm:
        st.module = m->register_module(
            key, std::make_shared<nn::LayerNorm<float>>(nn::LayerNormOptions(kE).eps(0.1).elementwise_affine(coin(0.7))));
        break;
      case RandomNet::kAttention: {
        const i64 heads = i64(1) << pick(3);  // 1, 2 or 4
        st.module = m->register_module(key, std::make_shared<nn::MultiheadAttention<float>>(
                                                nn::MultiheadAttentionOptions(kE, heads).batch_first(true)
                                                    .bias(coin(0.8)).dropout(0.1)));
        st.key_padding = m->has_kpm && coin(0.6);
        st.attn_bool = m->has_bool_mask && coin(0.5);
        st.attn_float = !st.attn_bool && m->has_float_mask && coin(0.6);
        st.causal = coin(0.3);
        st.weights = coin(0.4);
        st.average = coin(0.5);
        break;
      }
      case RandomNet::kSdpa:
        st.attn_bool = m->has_bool_mask && coin(0.5);
        st.causal = !st.attn_bool && coin(0.5);
        break;
      default: break;
    }
    about << (i ? " " : "") << kind_name(st.kind) << "(" << st.a;
    if (st.kind == RandomNet::kAdd || st.kind == RandomNet::kSub || st.kind == RandomNet::kMulTanh ||
        st.kind == RandomNet::kCenter || st.kind == RandomNet::kCatNarrow || st.kind == RandomNet::kAttention ||
        st.kind == RandomNet::kSdpa || st.kind == RandomNet::kStackSum || st.kind == RandomNet::kUnsqueezeExpand)
      about << "," << st.b;
    if (st.key_padding) about << ",kpm";
    if (st.attn_bool) about << ",bool_mask";
    if (st.attn_float) about << ",float_mask";
    if (st.causal) about << ",causal";
    if (st.weights) about << (st.average ? ",weights" : ",head_weights");
    about << ")";
    m->steps.push_back(std::move(st));
  }
  if (coin(0.3)) m->extra_output = 1 + static_cast<std::size_t>(pick(n_steps + 1));

  // Dynamic axes: batch and seq, batch only, or none.
  const int dynamic = pick(3);
  const std::string batch = dynamic >= 1 ? "batch" : "2", seq = dynamic == 2 ? "seq" : "5";
  std::vector<InputSpec> inputs{tensor("x", {batch, seq, std::to_string(kE)})};
  if (m->has_kpm) inputs.push_back(mask("kpm", {batch, seq}));
  if (m->has_bool_mask) inputs.push_back(mask("attn_mask", {seq, seq}));
  if (m->has_float_mask) inputs.push_back(tensor("float_mask", {seq, seq}));
  std::vector<std::string> outputs{"y"};
  if (m->extra_output > 0) outputs.push_back("y_extra");
  for (const auto& st : m->steps)
    if (st.weights) {
      outputs.push_back("weights");
      break;
    }
  Case c{"random_" + std::string(index < 10 ? "0" : "") + std::to_string(index), m,
         [m](const onnx::Inputs& in) { return m->run(in); }, inputs, outputs, kBatchSeq};
  // Key 0 is never masked, so that no query row is fully masked (a rule of its own, covered above).
  const bool has_kpm = m->has_kpm, has_bool = m->has_bool_mask;
  c.adjust = [has_kpm, has_bool](std::vector<Input>& in) {
    std::size_t next = 1;
    if (has_kpm) {
      BoolArray& kpm = std::get<BoolArray>(in[next++]);
      for (std::size_t n = 0; n < kpm.shape()[0]; ++n) kpm(n, 0) = false;
    }
    if (has_bool) {
      BoolArray& attn = std::get<BoolArray>(in[next++]);
      for (std::size_t i = 0; i < attn.shape()[0]; ++i) attn(i, 0) = false;
    }
  };
  c.about = about.str() + " -> " + std::to_string(outputs.size()) + " outputs, " +
            (dynamic == 0 ? "static" : dynamic == 1 ? "dynamic batch" : "dynamic batch and seq");
  return c;
}

std::vector<Case> cases(int random_cases) {
  std::vector<Case> out;
  {
    auto m = std::make_shared<nn::Sequential<float>>(std::vector<std::shared_ptr<nn::Module<float>>>{
        std::make_shared<nn::Linear<float>>(6, 16), std::make_shared<nn::GELU<float>>(),
        std::make_shared<nn::Linear<float>>(16, 16),
        std::make_shared<nn::GELU<float>>(nn::GELUOptions().approximate("tanh")),
        std::make_shared<nn::Dropout<float>>(0.5), std::make_shared<nn::Linear<float>>(16, 4),
        std::make_shared<nn::ReLU<float>>()});
    out.push_back({"mlp", m,
                   [m](const onnx::Inputs& in) { return std::vector<Tensor<float>>{m->forward(in.tensor(0))}; },
                   {tensor("x", {"batch", "6"})}, {"y"}, {{{"batch", 2}}, {{"batch", 5}}, {{"batch", 1}}}});
  }
  {
    // nn.RMSNorm with a random weight; F.rms_norm over (seq, 8) at float's default eps.
    auto m = std::make_shared<nn::RMSNorm<float>>(nn::RMSNormOptions(8).eps(1e-6));
    nn::init::normal_(m->weight, 1.0, 0.5);
    out.push_back({"rms_norm",
                   m,
                   [m](const onnx::Inputs& in) {
                     const Tensor<float>& x = in.tensor(0);
                     return std::vector<Tensor<float>>{m->forward(x), rms_norm(x, {x.size(1), x.size(2)})};
                   },
                   {tensor("x", {"batch", "seq", "8"})},
                   {"y", "y_2d"},
                   kBatchSeq});
  }
  {
    auto m = std::make_shared<OpsNet>();
    out.push_back({"ops", m, [m](const onnx::Inputs& in) { return m->run(in.tensor(0)); },
                   {tensor("x", {"batch", "seq", "8"})}, {"pointwise", "gram", "chosen", "total"}, kBatchSeq});
  }
  {
    auto m = std::make_shared<Embedder>();
    out.push_back({"embedding", m,
                   [m](const onnx::Inputs& in) {
                     const IndexArray positions = xt::arange<i64>(static_cast<i64>(in.indices(0).shape(1)));
                     return std::vector<Tensor<float>>{
                         m->head->forward(m->tok->forward(in.indices(0)) + m->pos->forward(positions))};
                   },
                   {{InputSpec::Index, "tokens", {"batch", "seq"}, 12}},
                   {"logits"}, kBatchSeq});
  }
  {
    // x (batch, 2, 5, 8) as (B, H, T, D); the tables of positions 0..4 are made in the forward (constants).
    auto m = std::make_shared<nn::Sequential<float>>();
    out.push_back({"rotary_embedding",
                   m,
                   [](const onnx::Inputs& in) {
                     const auto [cos, sin] = rope_cos_sin(rope_inv_freq<float>(8, 10000.0), IndexArray{0, 1, 2, 3, 4});
                     return std::vector<Tensor<float>>{rotary_embedding(in.tensor(0), cos, sin)};
                   },
                   {tensor("x", {"batch", "2", "5", "8"})},
                   {"y"},
                   {{{"batch", 2}}, {{"batch", 3}}, {{"batch", 1}}}});
  }
  {
    auto m = mha(false);  // (L, N, E), self-attention, weights averaged over heads
    out.push_back({"mha_self_seq_first", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0));
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"seq", "batch", "8"})}, {"y", "weights"}, kBatchSeq});
  }
  {
    auto m = mha(true);  // key padding mask, the first sequence's keys all masked
    out.push_back({"mha_key_padding", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), in.mask(1), false);
                     return std::vector<Tensor<float>>{y};
                   },
                   {tensor("x", {"batch", "seq", "8"}), mask("key_padding_mask", {"batch", "seq"})}, {"y"}, kBatchSeq,
                   [](std::vector<Input>& in) {
                     BoolArray& kpm = std::get<BoolArray>(in[1]);
                     for (std::size_t j = 0; j < kpm.shape()[1]; ++j) kpm(0, j) = true;
                   }});
  }
  {
    auto m = mha(true);  // bool attn_mask (L, S), weights per head
    out.push_back({"mha_bool_attn_mask", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), {}, true, in.mask(1), false);
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"batch", "seq", "8"}), mask("attn_mask", {"seq", "seq"})}, {"y", "weights"},
                   kBatchSeq});
  }
  {
    auto m = mha(true);  // float attn_mask (L, S) and float key padding mask (N, S)
    out.push_back({"mha_float_masks", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), in.tensor(2).value(), true,
                                              in.tensor(1).value());
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"batch", "seq", "8"}), tensor("attn_mask", {"seq", "seq"}),
                    tensor("key_padding_mask", {"batch", "seq"})},
                   {"y", "weights"}, kBatchSeq});
  }
  {
    auto m = mha(true);  // a constant (N*H, L, S) bool mask: static sizes
    BoolArray per_head = BoolArray::from_shape({4, 3, 3});
    for (std::size_t i = 0; i < per_head.size(); ++i) per_head.data()[i] = (i * 7) % 5 == 0;
    out.push_back({"mha_per_head_mask", m,
                   [m, per_head](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), {}, true, per_head);
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"2", "3", "8"})}, {"y", "weights"}, {{}}});
  }
  {
    auto m = mha(false);  // causal, (L, N, E)
    out.push_back({"mha_causal", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), {}, true, {}, true, true);
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"seq", "batch", "8"})}, {"y", "weights"}, kBatchSeq});
  }
  {
    auto m = mha(false);  // unbatched (L, E) with a key padding mask (S)
    out.push_back({"mha_unbatched", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(0), in.tensor(0), in.mask(1));
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("x", {"seq", "8"}), mask("key_padding_mask", {"seq"})}, {"y", "weights"},
                   {{{"seq", 5}}, {{"seq", 8}}, {{"seq", 2}}},
                   [](std::vector<Input>& in) { std::get<BoolArray>(in[1])(0) = false; }});
  }
  {
    auto m = mha(true);  // cross-attention: queries (N, L, E), memory (N, S, E) as key and value
    out.push_back({"mha_cross", m,
                   [m](const onnx::Inputs& in) {
                     auto [y, w] = m->forward(in.tensor(0), in.tensor(1), in.tensor(1));
                     return std::vector<Tensor<float>>{y, w};
                   },
                   {tensor("query", {"batch", "tgt", "8"}), tensor("memory", {"batch", "src", "8"})},
                   {"y", "weights"},
                   {{{"batch", 2}, {"tgt", 3}, {"src", 5}}, {{"batch", 3}, {"tgt", 6}, {"src", 2}},
                    {{"batch", 1}, {"tgt", 2}, {"src", 7}}}});
  }
  {
    auto m = std::make_shared<nn::Module<float>>("sdpa");  // F.scaled_dot_product_attention, causal and masked
    out.push_back({"sdpa", m,
                   [](const onnx::Inputs& in) {
                     const Tensor<float>& q = in.tensor(0);
                     const AttnMask<float> mask(in.mask(1));
                     return std::vector<Tensor<float>>{scaled_dot_product_attention(q, q, q, {}, 0.0, true),
                                                       scaled_dot_product_attention(q, q, q, mask, 0.0, false, 0.3)};
                   },
                   {tensor("q", {"batch", "2", "seq", "4"}), mask("attn_mask", {"seq", "seq"})},
                   {"causal", "masked"}, kBatchSeq});
  }
  {
    auto m = std::make_shared<nn::Module<float>>("sdpa_gqa");  // grouped-query: 4 query heads, 2 KV heads
    out.push_back({"sdpa_gqa",
                   m,
                   [](const onnx::Inputs& in) {
                     const Tensor<float>&q = in.tensor(0), &kv = in.tensor(1);
                     return std::vector<Tensor<float>>{
                         scaled_dot_product_attention(q, kv, kv, {}, 0.0, true, std::nullopt, true),
                         scaled_dot_product_attention(q, kv, kv, AttnMask<float>(in.mask(2)), 0.0, false, 0.3, true)};
                   },
                   {tensor("q", {"batch", "4", "seq", "4"}), tensor("kv", {"batch", "2", "seq", "4"}),
                    mask("attn_mask", {"seq", "seq"})},
                   {"causal", "masked"},
                   kBatchSeq});
  }
  {
    // post-norm ReLU encoder, (S, N, E), key padding mask
    auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
        nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16));
    auto m = std::make_shared<nn::TransformerEncoder<float>>(layer, 2);
    out.push_back({"encoder_post_norm", m,
                   [m](const onnx::Inputs& in) {
                     return std::vector<Tensor<float>>{m->forward(in.tensor(0), {}, in.mask(1))};
                   },
                   {tensor("src", {"seq", "batch", "8"}), mask("src_key_padding_mask", {"batch", "seq"})}, {"y"},
                   kBatchSeq});
  }
  {
    // pre-norm GELU encoder, batch_first, causal, with a final LayerNorm
    auto layer = std::make_shared<nn::TransformerEncoderLayer<float>>(
        nn::TransformerEncoderLayerOptions(8, 2).dim_feedforward(16).activation("gelu").batch_first(true).norm_first(
            true));
    auto m = std::make_shared<nn::TransformerEncoder<float>>(layer, 2, std::make_shared<nn::LayerNorm<float>>(8));
    out.push_back({"encoder_pre_norm", m,
                   [m](const onnx::Inputs& in) {
                     return std::vector<Tensor<float>>{m->forward(in.tensor(0), {}, {}, true)};
                   },
                   {tensor("src", {"batch", "seq", "8"})}, {"y"}, kBatchSeq});
  }
  {
    // models::GPT: token and position embeddings, 2 causal pre-norm GELU blocks, ln_f, the head tied
    // to wte (a matmul with wte.weight transposed); tokens int64 (batch, seq)
    models::GPTConfig config;
    config.vocab_size = 11, config.block_size = 16, config.n_layer = 2, config.n_head = 2, config.n_embd = 8;
    config.dropout = 0.1;
    auto m = std::make_shared<models::GPT<float>>(config);
    out.push_back({"gpt", m,
                   [m](const onnx::Inputs& in) { return std::vector<Tensor<float>>{m->forward(in.indices(0))}; },
                   {{InputSpec::Index, "idx", {"batch", "seq"}, 11}}, {"logits"},
                   {{{"batch", 2}, {"seq", 5}}, {{"batch", 3}, {"seq", 16}}, {{"batch", 1}, {"seq", 1}}}});
  }
  {
    // the same with the tiled (flash) attention path forced: traced as the same composite op
    models::GPTConfig config;
    config.vocab_size = 11, config.block_size = 16, config.n_layer = 1, config.n_head = 2, config.n_embd = 8;
    auto m = std::make_shared<models::GPT<float>>(config);
    out.push_back({"gpt_tiled_attention", m,
                   [m](const onnx::Inputs& in) {
                     const AttentionPath before = get_attention_path();
                     set_attention_path(AttentionPath::Tiled);
                     std::vector<Tensor<float>> y;
                     try {
                       y = {m->forward(in.indices(0))};
                     } catch (...) {
                       set_attention_path(before);
                       throw;
                     }
                     set_attention_path(before);
                     return y;
                   },
                   {{InputSpec::Index, "idx", {"batch", "seq"}, 11}}, {"logits"},
                   {{{"batch", 2}, {"seq", 5}}, {{"batch", 3}, {"seq", 9}}, {{"batch", 1}, {"seq", 2}}}});
  }
  {
    // post-norm ReLU decoder layer, (T, N, E): bool tgt_mask (T, T) and memory_mask (T, S), key
    // padding masks of both (the first target's keys all masked)
    auto m = std::make_shared<nn::TransformerDecoderLayer<float>>(
        nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16));
    out.push_back({"decoder_layer_masks", m,
                   [m](const onnx::Inputs& in) {
                     return std::vector<Tensor<float>>{m->forward(in.tensor(0), in.tensor(1), in.mask(2), in.mask(3),
                                                                  in.mask(4), in.mask(5))};
                   },
                   {tensor("tgt", {"tgt", "batch", "8"}), tensor("memory", {"src", "batch", "8"}),
                    mask("tgt_mask", {"tgt", "tgt"}), mask("memory_mask", {"tgt", "src"}),
                    mask("tgt_key_padding_mask", {"batch", "tgt"}), mask("memory_key_padding_mask", {"batch", "src"})},
                   {"y"},
                   {{{"batch", 2}, {"tgt", 3}, {"src", 5}}, {{"batch", 3}, {"tgt", 6}, {"src", 2}},
                    {{"batch", 1}, {"tgt", 2}, {"src", 7}}},
                   [](std::vector<Input>& in) {
                     BoolArray& kpm = std::get<BoolArray>(in[4]);
                     for (std::size_t j = 0; j < kpm.shape()[1]; ++j) kpm(0, j) = true;
                   }});
  }
  {
    // pre-norm GELU decoder, batch_first, causal self-attention, float memory mask (T, S) and a bool
    // memory key padding mask, final LayerNorm
    auto layer = std::make_shared<nn::TransformerDecoderLayer<float>>(
        nn::TransformerDecoderLayerOptions(8, 2).dim_feedforward(16).activation("gelu").batch_first(true).norm_first(
            true));
    auto m = std::make_shared<nn::TransformerDecoder<float>>(layer, 2, std::make_shared<nn::LayerNorm<float>>(8));
    out.push_back({"decoder_pre_norm_causal", m,
                   [m](const onnx::Inputs& in) {
                     return std::vector<Tensor<float>>{
                         m->forward(in.tensor(0), in.tensor(1), {}, in.tensor(2).value(), {}, in.mask(3), true)};
                   },
                   {tensor("tgt", {"batch", "tgt", "8"}), tensor("memory", {"batch", "src", "8"}),
                    tensor("memory_mask", {"tgt", "src"}), mask("memory_key_padding_mask", {"batch", "src"})},
                   {"y"},
                   {{{"batch", 2}, {"tgt", 3}, {"src", 5}}, {{"batch", 3}, {"tgt", 6}, {"src", 2}},
                    {{"batch", 1}, {"tgt", 2}, {"src", 7}}}});
  }
  {
    // nn::Transformer (S, N, E) / (T, N, E): src key padding, a float causal tgt_mask (an input),
    // bool memory_mask
    auto m = std::make_shared<nn::Transformer<float>>(
        nn::TransformerOptions<float>(8, 2).num_encoder_layers(1).num_decoder_layers(2).dim_feedforward(16));
    out.push_back({"transformer", m,
                   [m](const onnx::Inputs& in) {
                     return std::vector<Tensor<float>>{m->forward(in.tensor(0), in.tensor(1), {}, in.tensor(2).value(),
                                                                  in.mask(3), in.mask(4))};
                   },
                   {tensor("src", {"src", "batch", "8"}), tensor("tgt", {"tgt", "batch", "8"}),
                    tensor("tgt_mask", {"tgt", "tgt"}), mask("memory_mask", {"tgt", "src"}),
                    mask("src_key_padding_mask", {"batch", "src"})},
                   {"y"},
                   {{{"batch", 2}, {"tgt", 3}, {"src", 5}}, {{"batch", 3}, {"tgt", 6}, {"src", 2}},
                    {{"batch", 1}, {"tgt", 2}, {"src", 7}}},
                   [](std::vector<Input>& in) {  // tgt_mask: causal, -1e4 above the diagonal (JSON has no -inf)
                     Array<float>& t = std::get<Tensor<float>>(in[2]).mutable_value();
                     for (std::size_t i = 0; i < t.shape()[0]; ++i)
                       for (std::size_t j = 0; j < t.shape()[1]; ++j) t(i, j) = j > i ? -1e4f : 0.0f;
                   }});
  }
  for (int i = 0; i < random_cases; ++i) out.push_back(random_case(i));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: " << argv[0] << " DIR [RANDOM_CASES]\n";
    return 2;
  }
  const int random_cases = argc == 3 ? std::atoi(argv[2]) : 30;
  manual_seed(1);
  std::set<OpKind> covered;
  try {
    for (const Case& c : cases(random_cases)) {
      write_case(c, argv[1], covered);
      std::cout << "exported " << c.name << (c.about.empty() ? "" : ": " + c.about) << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "FAIL: " << e.what() << "\n";
    return 1;
  }
  // Every op kind the exporter writes (xgrad/onnx/op_table.cpp) is in some case, so that ONNX
  // Runtime checks its nodes.
  std::string missing;
  for (OpKind kind : kOpKinds)
    if (onnx::op_export(kind).write != nullptr && covered.count(kind) == 0) missing += " " + std::string(op_name(kind));
  if (!missing.empty()) {
    std::cerr << "FAIL: onnx::export_model writes op kinds no case runs:" << missing
              << "; add them to a case, so that ONNX Runtime checks them\n";
    return 1;
  }
  return 0;
}
