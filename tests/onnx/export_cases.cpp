// Exports small models of every kind onnx::export_model covers, for check_onnx_models.py (onnx's
// checker) and check_onnx_runtime.cjs (ONNX Runtime). For each case, DIR/<case>.onnx and
// DIR/<case>.json: the inputs and xgrad's own outputs (eval mode) at three sizes of every dynamic
// axis, the first being the example the model was exported with.
//
//   xgrad_onnx_export_cases DIR
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <xgrad/models/gpt.hpp>
#include <xgrad/nn/nn.hpp>
#include <xgrad/onnx/export.hpp>

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

void write_case(const Case& c, const std::string& dir) {
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
    const std::vector<Tensor<float>> out = c.forward(onnx::Inputs(in));
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
    const Tensor<float> pos = abs(h) + 1.0f;
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

std::vector<Case> cases() {
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
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " DIR\n";
    return 2;
  }
  manual_seed(1);
  try {
    for (const Case& c : cases()) {
      write_case(c, argv[1]);
      std::cout << "exported " << c.name << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "FAIL: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
