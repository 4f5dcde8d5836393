// The list of gradient checks shared by the gradcheck tool and tests/test_gradcheck_checks.cpp
// (see gradcheck_checks.hpp).
#include "gradcheck_checks.hpp"

#include <cmath>
#include <optional>

namespace gradcheck_checks {

namespace {

using xgrad::Generator;
using xgrad::IndexArray;
using xgrad::Shape;
using T64 = xgrad::Tensor<double>;
using Inputs = std::vector<T64>;
namespace nn = xgrad::nn;

// ---- inputs ----------------------------------------------------------------------------------

enum class Values { normal, away_from_zero, positive };

// Random double inputs requiring grad, each from its own stream derived from the seed.
class Maker {
 public:
  explicit Maker(std::uint64_t seed) : seed_(seed) {}
  T64 operator()(const Shape& shape, Values values = Values::normal) {
    Generator gen(seed_ * 1000 + count_++);
    T64 t = values == Values::positive ? xgrad::rand<double>(shape, gen) : xgrad::randn<double>(shape, gen);
    for (auto& v : t.mutable_value()) {
      if (values == Values::positive) v += 0.5;                        // [0.5, 1.5)
      if (values == Values::away_from_zero) v += v >= 0 ? 0.1 : -0.1;  // no kink within 0.1
    }
    return t.requires_grad_(true);
  }
  IndexArray indices(const Shape& shape, std::size_t high) {
    Generator gen(seed_ * 1000 + count_++);
    IndexArray a = IndexArray::from_shape(shape);
    for (auto& v : a) v = static_cast<std::int64_t>(gen.next_u64() % high);
    return a;
  }
  xgrad::BoolArray mask(const Shape& shape, double p_true) {
    Generator gen(seed_ * 1000 + count_++);
    xgrad::BoolArray a = xgrad::BoolArray::from_shape(shape);
    for (auto& v : a) v = gen.uniform() < p_true;
    return a;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t count_ = 0;
};

std::string shapes_of(const Inputs& inputs) {
  std::string s;
  for (const auto& t : inputs) s += (s.empty() ? "" : " ") + xgrad::shape_str(t.shape());
  return s;
}

// ---- the checks ------------------------------------------------------------------------------

// An op over its inputs; `note` adds what the shapes do not say (indices, masks).
Outcome op_check(const xgrad::GradcheckFunction& f, const Inputs& inputs, const xgrad::GradcheckOptions& options,
                 const std::string& note = "") {
  return {shapes_of(inputs) + (note.empty() ? "" : " " + note), xgrad::gradcheck(f, inputs, options)};
}

// A module over its input x (when defined) and every parameter; `evaluate` computes the output
// from x and re-seeds whatever it draws.
Outcome module_check(const nn::Module<double>& module, const T64& x, const std::function<T64()>& evaluate,
                     const xgrad::GradcheckOptions& options, const std::string& input_note = "") {
  xgrad::NamedTensors tensors;
  if (x.defined()) tensors.emplace_back("input", x);
  std::size_t n = 0;
  for (const auto& p : module.named_parameters()) {
    tensors.push_back(p);
    n += p.second.numel();
  }
  const std::string input = x.defined() ? xgrad::shape_str(x.shape()) : input_note;
  const std::size_t count = tensors.size() - (x.defined() ? 1 : 0);
  return {count == 0 ? input : input + " + " + std::to_string(count) + " params (" + std::to_string(n) + " values)",
          xgrad::gradcheck_parameters(evaluate, tensors, options)};
}

// A module's evaluation with the default generator re-seeded first, so that every evaluation
// draws the same dropout masks.
std::function<T64()> reseeded(std::uint64_t seed, std::function<T64()> evaluate) {
  return [=] {
    xgrad::manual_seed(seed + 7);
    return evaluate();
  };
}

// One input x (B, L, D); `call` says what is computed from it.
Check unary(const std::string& name, const std::string& call, T64 (*op)(const T64&), Values values = Values::normal) {
  return {name, call + ", x (B, L, D)", [=](const Sizes& s, const xgrad::GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0]); }, {make({s.B, s.L, s.D}, values)}, o);
          }};
}

// Binary ops with broadcasting: (B, L, D) with (L, 1).
Check binary(const std::string& name, T64 (*op)(const T64&, const T64&), Values rhs = Values::normal) {
  return {name, name + "(a, b), a (B, L, D), b (L, 1) broadcast",
          [=](const Sizes& s, const xgrad::GradcheckOptions& o) {
            Maker make(s.seed);
            return op_check([=](const Inputs& in) { return op(in[0], in[1]); },
                            {make({s.B, s.L, s.D}), make({s.L, 1}, rhs)}, o);
          }};
}

}  // namespace

std::vector<Check> all_checks() {
  using O = xgrad::GradcheckOptions;
  std::vector<Check> c;
  // elementwise.cpp
  c.push_back(binary("add", [](const T64& a, const T64& b) { return xgrad::add(a, b); }));
  c.push_back(binary("sub", [](const T64& a, const T64& b) { return xgrad::sub(a, b); }));
  c.push_back(binary("mul", [](const T64& a, const T64& b) { return xgrad::mul(a, b); }));
  c.push_back(binary(
      "div", [](const T64& a, const T64& b) { return xgrad::div(a, b); }, Values::positive));
  c.push_back(unary("add_scalar", "x + 1.5", [](const T64& a) { return xgrad::add(a, 1.5); }));
  c.push_back(unary("mul_scalar", "x * -2.5", [](const T64& a) { return xgrad::mul(a, -2.5); }));
  c.push_back(unary("rsub", "2 - x", [](const T64& a) { return xgrad::rsub(a, 2.0); }));
  c.push_back(unary(
      "rdiv", "2 / x, x > 0", [](const T64& a) { return xgrad::rdiv(a, 2.0); }, Values::positive));
  c.push_back(unary("neg", "-x", [](const T64& a) { return xgrad::neg(a); }));
  c.push_back(unary(
      "pow", "pow(x, 2.5), x > 0", [](const T64& a) { return xgrad::pow(a, 2.5); }, Values::positive));
  c.push_back(unary("exp", "exp(x)", [](const T64& a) { return xgrad::exp(a); }));
  c.push_back(unary(
      "log", "log(x), x > 0", [](const T64& a) { return xgrad::log(a); }, Values::positive));
  c.push_back(unary(
      "sqrt", "sqrt(x), x > 0", [](const T64& a) { return xgrad::sqrt(a); }, Values::positive));
  c.push_back(unary(
      "abs", "abs(x), |x| > 0.1", [](const T64& a) { return xgrad::abs(a); }, Values::away_from_zero));
  c.push_back(unary("tanh", "tanh(x)", [](const T64& a) { return xgrad::tanh(a); }));
  c.push_back(unary("sigmoid", "sigmoid(x)", [](const T64& a) { return xgrad::sigmoid(a); }));
  c.push_back(unary(
      "relu", "relu(x), |x| > 0.1", [](const T64& a) { return xgrad::relu(a); }, Values::away_from_zero));
  c.push_back(unary("gelu", "gelu(x)", [](const T64& a) { return xgrad::gelu(a); }));
  c.push_back(unary("gelu_tanh", "gelu(x, \"tanh\")", [](const T64& a) { return xgrad::gelu(a, "tanh"); }));
  c.push_back(
      unary("clamp", "clamp(x, -0.55, 0.45)", [](const T64& a) { return xgrad::clamp<double>(a, -0.55, 0.45); }));
  // reduction.cpp
  c.push_back(unary("sum", "sum(x)", [](const T64& a) { return xgrad::sum(a); }));
  c.push_back(unary("sum_dims", "sum(x, {0, -1}, keepdim)", [](const T64& a) { return xgrad::sum(a, {0, -1}, true); }));
  c.push_back(unary("mean", "mean(x)", [](const T64& a) { return xgrad::mean(a); }));
  c.push_back(unary("mean_dims", "mean(x, {1})", [](const T64& a) { return xgrad::mean(a, {1}); }));
  c.push_back(unary("var", "var(x)", [](const T64& a) { return xgrad::var(a); }));
  c.push_back(unary("var_dims", "var(x, {-1}, biased, keepdim)",
                    [](const T64& a) { return xgrad::var(a, {-1}, false, true); }));
  c.push_back(unary("amax", "amax(x, {1, 2})", [](const T64& a) { return xgrad::amax(a, {1, 2}); }));
  c.push_back(unary("max", "max(x)", [](const T64& a) { return xgrad::max(a); }));
  c.push_back(unary("max_dim", "max(x, -1).values", [](const T64& a) { return xgrad::max(a, -1).first; }));
  // shape.cpp
  c.push_back(unary("transpose", "transpose(x, 0, 2)", [](const T64& a) { return xgrad::transpose(a, 0, 2); }));
  c.push_back(unary("permute", "permute(x, {1, 2, 0})", [](const T64& a) { return xgrad::permute(a, {1, 2, 0}); }));
  c.push_back(unary("reshape", "reshape(x, {-1, D})", [](const T64& a) {
    return xgrad::reshape(a, {-1, std::int64_t(a.size(2))});
  }));
  c.push_back(unary("view", "view(x, {B, -1})", [](const T64& a) {
    return xgrad::view(a, {std::int64_t(a.size(0)), -1});
  }));
  c.push_back(unary("flatten", "flatten(x, 1)", [](const T64& a) { return xgrad::flatten(a, 1); }));
  c.push_back(unary("unsqueeze", "unsqueeze(x, 1)", [](const T64& a) { return xgrad::unsqueeze(a, 1); }));
  c.push_back(unary("squeeze", "squeeze(unsqueeze(x, 0))",
                    [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, 0)); }));
  c.push_back(unary("squeeze_dim", "squeeze(unsqueeze(x, -1), -1)",
                    [](const T64& a) { return xgrad::squeeze(xgrad::unsqueeze(a, -1), -1); }));
  c.push_back(unary("contiguous", "contiguous(x)", [](const T64& a) { return xgrad::contiguous(a) * 1.0; }));
  c.push_back({"expand", "expand(x, (B, L, D)), x (L, 1)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 const std::vector<std::int64_t> to{std::int64_t(s.B), -1, std::int64_t(s.D)};
                 return op_check([=](const Inputs& in) { return xgrad::expand(in[0], to); }, {make({s.L, 1})}, o);
               }});
  c.push_back({"cat", "cat({a, b, a}, dim 1), a (B, L, D), b (B, 1, D)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check(
                     [](const Inputs& in) {
                       return xgrad::cat<double>({in[0], in[1], in[0]}, 1);
                     },
                     {make({s.B, s.L, s.D}), make({s.B, 1, s.D})}, o);
               }});
  c.push_back({"stack", "stack({a, b}, dim -1), a and b (B, L, D)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check(
                     [](const Inputs& in) {
                       return xgrad::stack<double>({in[0], in[1]}, -1);
                     },
                     {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
               }});
  c.push_back(unary("narrow", "narrow(x, 2, 1, D - 1)",
                    [](const T64& a) { return xgrad::narrow(a, 2, 1, std::int64_t(a.size(2)) - 1); }));
  c.push_back(unary("slice", "slice(x, -1, 0, -1, 2)", [](const T64& a) { return xgrad::slice(a, -1, 0, -1, 2); }));
  // indexing.cpp
  c.push_back({"index_select", "index_select(x, 1, indices with repeats), x (B, L, D)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 const T64 x = make({s.B, s.L, s.D});
                 const IndexArray index = make.indices({2 * s.L}, s.L);
                 return op_check([=](const Inputs& in) { return xgrad::index_select(in[0], 1, index); }, {x}, o,
                                 "index (" + std::to_string(2 * s.L) + ")");
               }});
  // (With a padding_idx its row gets no gradient by definition, which no finite difference shows.)
  c.push_back({"embedding", "embedding(indices (B, L), weight (C, D))", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 const T64 w = make({s.C, s.D});
                 const IndexArray idx = make.indices({s.B, s.L}, s.C);
                 return op_check([=](const Inputs& in) { return xgrad::embedding<double>(idx, in[0]); }, {w}, o,
                                 "indices (" + std::to_string(s.B) + ", " + std::to_string(s.L) + ")");
               }});
  c.push_back({"masked_fill", "masked_fill(x, mask (L, D) broadcast, -1), x (B, L, D)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 const T64 x = make({s.B, s.L, s.D});
                 const xgrad::BoolArray mask = make.mask({s.L, s.D}, 0.4);
                 return op_check([=](const Inputs& in) { return xgrad::masked_fill(in[0], mask, -1.0); }, {x}, o,
                                 "mask (" + std::to_string(s.L) + ", " + std::to_string(s.D) + ")");
               }});
  c.push_back({"where", "where(condition (B, L, D), a (B, L, D), b (D))", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 const T64 a = make({s.B, s.L, s.D}), b = make({s.D});
                 const xgrad::BoolArray cond = make.mask({s.B, s.L, s.D}, 0.5);
                 return op_check([=](const Inputs& in) { return xgrad::where(cond, in[0], in[1]); }, {a, b}, o,
                                 "condition (B, L, D)");
               }});
  // matmul.cpp
  c.push_back({"matmul", "matmul(a (B, L, D), b (D, F)): batch broadcast", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); },
                                 {make({s.B, s.L, s.D}), make({s.D, s.F})}, o);
               }});
  c.push_back(
      {"matmul_batched", "matmul(a (B, 1, L, D), b (H, D, F)): batch dims broadcast", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         return op_check([](const Inputs& in) { return xgrad::matmul(in[0], in[1]); },
                         {make({s.B, 1, s.L, s.D}), make({s.H, s.D, s.F})}, o);
       }});
  c.push_back({"matmul_vector", "matmul(v (D), m (B, D, F)) and matmul(m, w (F))", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check([](const Inputs& in) { return xgrad::matmul(xgrad::matmul(in[0], in[1]), in[2]); },
                                 {make({s.D}), make({s.B, s.D, s.F}), make({s.F})}, o);
               }});
  c.push_back({"linear", "linear(x (B, L, D), weight (F, D), bias (F))", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check([](const Inputs& in) { return xgrad::linear(in[0], in[1], in[2]); },
                                 {make({s.B, s.L, s.D}), make({s.F, s.D}), make({s.F})}, o);
               }});
  // softmax.cpp, layer_norm.cpp, dropout.cpp
  c.push_back(unary("softmax", "softmax(x, -1)", [](const T64& a) { return xgrad::softmax(a, -1); }));
  c.push_back(unary("log_softmax", "log_softmax(x, 1)", [](const T64& a) { return xgrad::log_softmax(a, 1); }));
  c.push_back({"layer_norm", "layer_norm(x (B, L, D), (D), weight, bias)", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check(
                     [=](const Inputs& in) { return xgrad::layer_norm(in[0], Shape{s.D}, in[1], in[2], 1e-5); },
                     {make({s.B, s.L, s.D}), make({s.D}), make({s.D})}, o);
               }});
  c.push_back({"dropout", "dropout(x (B, L, D), p 0.3), generator re-seeded", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check(
                     [=](const Inputs& in) {
                       Generator gen(s.seed + 7);
                       return xgrad::dropout(in[0], 0.3, true, &gen);
                     },
                     {make({s.B, s.L, s.D})}, o);
               }});
  // attention.cpp
  c.push_back(
      {"scaled_dot_product_attention", "q (B, H, L, D), k and v (B, H, L + 1, D), bool mask",
       [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         const xgrad::BoolArray mask = make.mask({s.L, s.L + 1}, 0.3);
         return op_check(
             [=](const Inputs& in) { return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], mask); },
             {make({s.B, s.H, s.L, s.D}), make({s.B, s.H, s.L + 1, s.D}), make({s.B, s.H, s.L + 1, s.D})}, o, "mask");
       }});
  c.push_back({"sdpa_causal_dropout", "causal attention with dropout 0.2 (re-seeded), q k v (B, L, D)",
               [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check(
                     [=](const Inputs& in) {
                       Generator gen(s.seed + 7);
                       return xgrad::scaled_dot_product_attention<double>(in[0], in[1], in[2], {}, 0.2, true,
                                                                          std::nullopt, &gen);
                     },
                     {make({s.B, s.L, s.D}), make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
               }});
  // loss.cpp
  c.push_back({"mse_loss", "mse_loss(input, target), both (B, L, D), mean", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check([](const Inputs& in) { return xgrad::mse_loss(in[0], in[1]); },
                                 {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
               }});
  c.push_back({"mse_loss_none", "mse_loss(input, target, \"none\")", [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 return op_check([](const Inputs& in) { return xgrad::mse_loss(in[0], in[1], "none"); },
                                 {make({s.B, s.L, s.D}), make({s.B, s.L, s.D})}, o);
               }});
  c.push_back({"cross_entropy", "cross_entropy(logits (B L, C), target (B L)), ignore_index, label smoothing 0.1",
               [](const Sizes& s, const O& o) {
                 Maker make(s.seed);
                 IndexArray target = make.indices({s.B * s.L}, s.C);
                 target(0) = -100;  // ignored
                 return op_check([=](const Inputs& in) { return xgrad::cross_entropy(in[0], target, -100, "mean", 0.1); },
                                 {make({s.B * s.L, s.C})}, o, "target (" + std::to_string(s.B * s.L) + ")");
               }});
  c.push_back(
      {"cross_entropy_nd", "cross_entropy(logits (B, C, L), target (B, L)), sum", [](const Sizes& s, const O& o) {
         Maker make(s.seed);
         const IndexArray target = make.indices({s.B, s.L}, s.C);
         return op_check([=](const Inputs& in) { return xgrad::cross_entropy(in[0], target, -100, "sum"); },
                         {make({s.B, s.C, s.L})}, o, "target (B, L)");
       }});

  // nn/: modules over their input and parameters, built from the seed.
  c.push_back({"nn.Linear", "Linear(D, F) on (B, L, D)", [](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::Linear<double>>(s.D, s.F);
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  c.push_back({"nn.LayerNorm", "LayerNorm(D) on (B, L, D)", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::LayerNorm<double>>(s.D);
                 Maker make(s.seed);
                 m->weight.mutable_value() = make({s.D}).value();  // not the ones and zeros of the init
                 m->bias.mutable_value() = make({s.D}).value();
                 const T64 x = make({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  c.push_back({"nn.GELU", "GELU() on (B, L, D)", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::GELU<double>>();
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  c.push_back({"nn.ReLU", "ReLU() on (B, L, D)", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::ReLU<double>>();
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D}, Values::away_from_zero);
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  c.push_back({"nn.Dropout", "Dropout(0.3) in training, default generator re-seeded", [](const Sizes& s, const O& o) {
                 auto m = std::make_shared<nn::Dropout<double>>(0.3);
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
               }});
  c.push_back({"nn.Embedding", "Embedding(C, D) on indices (B, L), then tanh", [](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::Embedding<double>>(s.C, s.D);
                 const IndexArray idx = Maker(s.seed).indices({s.B, s.L}, s.C);
                 // The input is indices: only the weight is checked.
                 return module_check(*m, T64(), [=] { return xgrad::tanh(m->forward(idx)); }, o, "indices (B, L)");
               }});
  c.push_back({"nn.MultiheadAttention", "MultiheadAttention(D, H, dropout 0.1), batch_first, key padding, weights",
               [](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::MultiheadAttention<double>>(
                     nn::MultiheadAttentionOptions(s.D, s.H).dropout(0.1).batch_first(true));
                 Maker make(s.seed);
                 for (auto& [name, p] : m->named_parameters()) p.mutable_value() = make(p.shape()).value();
                 const T64 x = make({s.B, s.L, s.D});
                 xgrad::BoolArray padding = xgrad::BoolArray(xt::zeros<bool>({s.B, s.L}));
                 padding(0, s.L - 1) = true;  // the last key of the first sequence
                 return module_check(
                     *m, x, reseeded(s.seed, [=] {
                       auto [out, weights] = m->forward(x, x, x, padding);
                       return xgrad::sum(out * out) + xgrad::sum(weights * weights);
                     }),
                     o);
               }});
  const auto encoder_layer = [](const Sizes& s, bool norm_first) {
    return std::make_shared<nn::TransformerEncoderLayer<double>>(nn::TransformerEncoderLayerOptions(s.D, s.H)
                                                                     .dim_feedforward(s.F)
                                                                     .dropout(0.2)
                                                                     .activation(norm_first ? "gelu" : "relu")
                                                                     .batch_first(true)
                                                                     .norm_first(norm_first));
  };
  for (const bool norm_first : {false, true}) {
    c.push_back({norm_first ? "nn.TransformerEncoderLayer_pre_norm" : "nn.TransformerEncoderLayer",
                 norm_first ? "pre-norm, gelu, dim_feedforward F, dropout 0.2, batch_first"
                            : "post-norm, relu, dim_feedforward F, dropout 0.2, batch_first",
                 [=](const Sizes& s, const O& o) {
                   xgrad::manual_seed(s.seed);
                   auto m = encoder_layer(s, norm_first);
                   const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                   return module_check(*m, x, reseeded(s.seed, [=] { return m->forward(x); }), o);
                 }});
  }
  c.push_back({"nn.TransformerEncoder", "2 pre-norm gelu layers + final LayerNorm, causal, dropout 0.2",
               [=](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::TransformerEncoder<double>>(
                     encoder_layer(s, true), 2, std::make_shared<nn::LayerNorm<double>>(s.D));
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, reseeded(s.seed, [=] {
                                       return m->forward(x, xgrad::AttnMask<double>(), xgrad::AttnMask<double>(),
                                                         /*is_causal=*/true);
                                     }),
                                     o);
               }});
  c.push_back({"nn.Sequential", "Sequential(Linear(D, F), GELU, Linear(F, D))", [](const Sizes& s, const O& o) {
                 xgrad::manual_seed(s.seed);
                 auto m = std::make_shared<nn::Sequential<double>>();
                 m->push_back(std::make_shared<nn::Linear<double>>(s.D, s.F));
                 m->push_back(std::make_shared<nn::GELU<double>>());
                 m->push_back(std::make_shared<nn::Linear<double>>(s.F, s.D));
                 const T64 x = Maker(s.seed)({s.B, s.L, s.D});
                 return module_check(*m, x, [=] { return m->forward(x); }, o);
               }});
  return c;
}

}  // namespace gradcheck_checks
