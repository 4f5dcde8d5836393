// models::GPT: PyTorch's state_dict keys, nanoGPT's init, the causal forward, the errors, and the
// tied head through the stack (one parameter, one optimizer state, one checkpoint and safetensors
// entry, the gradient of both uses summed). Agreement with PyTorch: test_gpt_parity.cpp.
#include "test_util.hpp"

#include <cmath>
#include <cstdio>

#include <xtensor/xview.hpp>

#include <xgrad/models/gpt.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/serialize/checkpoint.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

models::GPTConfig tiny() {
  models::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 6;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

IndexArray tokens(std::size_t n, std::size_t t, std::int64_t vocab, std::uint64_t seed) {
  Generator g(seed);
  IndexArray x = IndexArray::from_shape({n, t});
  for (auto& v : x) v = std::int64_t(g.next_u64() % std::uint64_t(vocab));
  return x;
}

std::vector<std::string> keys_of(const nn::Module<double>::Named<Tensor<double>>& named) {
  std::vector<std::string> k;
  for (const auto& [name, value] : named) k.push_back(name);
  return k;
}

}  // namespace

TEST(GPT, StateDictKeysAreTorchs) {
  models::GPT<double> model(tiny());
  std::vector<std::string> want = {"wte.weight", "wpe.weight"};
  for (const char* layer : {"0", "1"})
    for (const char* key : {"self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                            "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                            "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"})
      want.push_back(std::string("h.layers.") + layer + "." + key);
  want.push_back("ln_f.weight");
  want.push_back("ln_f.bias");
  EXPECT_EQ(keys_of(model.named_parameters()), want);  // the tied head adds no parameter
  EXPECT_EQ(model.state_dict().keys(), want);
}

TEST(GPT, NanoGPTInit) {
  models::GPTConfig c = tiny();
  c.n_embd = 32;
  c.vocab_size = 64;
  Generator gen(5);
  models::GPT<double> model(c, &gen);
  const auto sd = model.state_dict();
  const auto std_of = [](const Array<double>& a) {
    double s = 0, s2 = 0;
    for (double v : a) s += v, s2 += v * v;
    const double n = double(a.size());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  // Sample standard deviations of 1,024 to 4,096 draws: within 10% of the target.
  EXPECT_NEAR(std_of(sd.at("wte.weight")), 0.02, 0.002);
  EXPECT_NEAR(std_of(sd.at("h.layers.0.self_attn.in_proj_weight")), 0.02, 0.002);
  EXPECT_NEAR(std_of(sd.at("h.layers.1.linear1.weight")), 0.02, 0.002);
  EXPECT_NEAR(std_of(sd.at("h.layers.0.linear2.weight")), 0.01, 0.001);  // 0.02 / sqrt(2 n_layer)
  EXPECT_NEAR(std_of(sd.at("h.layers.1.self_attn.out_proj.weight")), 0.01, 0.001);
  for (const char* key : {"h.layers.0.linear1.bias", "h.layers.1.self_attn.in_proj_bias", "ln_f.bias"})
    EXPECT_EQ(max_abs_diff(sd.at(key), xt::zeros<double>(sd.at(key).shape())), 0) << key;
  for (const char* key : {"h.layers.0.norm1.weight", "ln_f.weight"})
    EXPECT_EQ(max_abs_diff(sd.at(key), xt::ones<double>(sd.at(key).shape())), 0) << key;
  // The generator decides: the same seed gives the same weights, another seed others.
  Generator same(5), other(6);
  EXPECT_EQ(max_abs_diff(models::GPT<double>(c, &same).state_dict().at("wte.weight"), sd.at("wte.weight")), 0);
  EXPECT_GT(max_abs_diff(models::GPT<double>(c, &other).state_dict().at("wte.weight"), sd.at("wte.weight")), 0);
}

TEST(GPT, ForwardIsCausalWithATiedHead) {
  Generator gen(1);
  models::GPT<double> model(tiny(), &gen);
  const IndexArray x = tokens(2, 6, 11, 2);
  const Array<double> logits = model.forward(x).value();
  ASSERT_EQ(shape_of(logits), (Shape{2, 6, 11}));
  // Changing the last token changes no earlier position's logits.
  IndexArray y = x;
  y(0, 5) = (y(0, 5) + 1) % 11;
  const Array<double> changed = model.forward(y).value();
  EXPECT_EQ(max_abs_diff(xt::view(changed, xt::all(), xt::range(0, 5)), xt::view(logits, xt::all(), xt::range(0, 5))), 0);
  EXPECT_GT(max_abs_diff(changed, logits), 0);
  // A prefix's logits are those of the same positions in the whole sequence.
  const IndexArray prefix = xt::view(x, xt::all(), xt::range(0, 3));
  EXPECT_LT(max_abs_diff(model.forward(prefix).value(), xt::view(logits, xt::all(), xt::range(0, 3))), 1e-12);
  // The head is wte.weight: ln_f(h(...)) @ wte.weight^T.
  model.wte->weight.mutable_value() *= 2.0;
  const Array<double> doubled = model.forward(x).value();
  model.wte->weight.mutable_value() /= 2.0;
  EXPECT_GT(max_abs_diff(doubled, logits), 1e-6);
}

TEST(GPT, Errors) {
  models::GPT<double> model(tiny());
  XGRAD_EXPECT_THROW_MSG(model.forward(tokens(1, 7, 11, 1)), "GPT: cannot forward a sequence of length 7: block size is only 6");
  XGRAD_EXPECT_THROW_MSG(model.forward(IndexArray::from_shape({4})), "GPT: idx must be (N, T) token indices");
  IndexArray bad = tokens(1, 3, 11, 1);
  bad(0, 1) = 11;
  EXPECT_THROW(model.forward(bad), std::invalid_argument);  // outside the vocabulary
  models::GPTConfig odd = tiny();
  odd.n_head = 3;
  XGRAD_EXPECT_THROW_MSG(models::GPT<double> m(odd), "GPT: n_head (3) must divide n_embd (8)");
  odd = tiny();
  odd.block_size = 0;
  XGRAD_EXPECT_THROW_MSG(models::GPT<double> m(odd), "must be positive");
}

// The gradient of the tied weight is the embedding's plus the head's: the same computation with
// an untied copy of wte.weight as the head gives these two parts separately.
TEST(GPT, TiedGradientSumsBothUses) {
  Generator gen(4);
  models::GPT<double> model(tiny(), &gen);
  const IndexArray x = tokens(2, 6, 11, 7), y = tokens(1, 12, 11, 8);
  const IndexArray targets = xt::reshape_view(y, {12});
  cross_entropy(reshape(model.forward(x), {-1, 11}), targets).backward();
  const Array<double> tied = model.wte->weight.grad();

  model.zero_grad();
  const Tensor<double> head(Array<double>(model.wte->weight.value()), /*requires_grad=*/true);
  const IndexArray positions = xt::arange<std::int64_t>(6);
  Tensor<double> h = model.wte->forward(x) + model.wpe->forward(positions);
  h = model.ln_f->forward(model.h->forward(h, {}, {}, /*is_causal=*/true));
  cross_entropy(reshape(linear(h, head), {-1, 11}), targets).backward();
  const Array<double> embedding_part = model.wte->weight.grad(), head_part = head.grad();
  EXPECT_GT(max_abs_diff(embedding_part, xt::zeros<double>(embedding_part.shape())), 0);
  EXPECT_GT(max_abs_diff(head_part, xt::zeros<double>(head_part.shape())), 0);
  EXPECT_LT(max_abs_diff(tied, Array<double>(embedding_part + head_part)), 1e-14);
}

// One optimizer state, one checkpoint entry, one safetensors entry for wte.weight; a checkpoint
// and a safetensors file restore the tied model exactly.
TEST(GPT, TiedWeightIsOneEntryEverywhere) {
  Generator gen(9);
  models::GPT<float> model(tiny(), &gen);
  optim::AdamW<float> opt(model.parameters(), optim::AdamWOptions(1e-2));
  const auto step = [&] {
    opt.zero_grad();
    cross_entropy(reshape(model.forward(tokens(2, 6, 11, 3)), {-1, 11}), IndexArray(xt::zeros<std::int64_t>({12})))
        .backward();
    opt.step();
  };
  step();
  std::size_t wte_params = 0;
  for (const auto& p : opt.parameters()) wte_params += p.same(model.wte->weight);
  EXPECT_EQ(wte_params, 1u);
  EXPECT_EQ(opt.parameters().size(), model.named_parameters().size());
  EXPECT_EQ(opt.state().size(), model.named_parameters().size());

  const std::string dir = ::testing::TempDir();
  save_checkpoint(dir + "gpt_tied.ckpt", model, opt, nullptr, default_generator(), 1);
  const Checkpoint<float> ckpt = load_checkpoint<float>(dir + "gpt_tied.ckpt");
  EXPECT_EQ(ckpt.model.keys(), model.state_dict().keys());
  save_safetensors(model, dir + "gpt_tied.safetensors");
  const SafetensorsHeader header = read_safetensors_header(dir + "gpt_tied.safetensors");
  std::size_t wte_entries = 0;
  for (const auto& e : header.tensors) wte_entries += e.name == "wte.weight";
  EXPECT_EQ(wte_entries, 1u);
  EXPECT_EQ(header.tensors.size(), model.named_parameters().size());

  // Restored into a fresh model: the same logits, and the same next step.
  Generator other(10);
  models::GPT<float> copy(tiny(), &other);
  optim::AdamW<float> copy_opt(copy.parameters(), optim::AdamWOptions(1e-2));
  Generator g;
  ckpt.restore(copy, copy_opt, nullptr, g);
  const IndexArray x = tokens(1, 4, 11, 5);
  EXPECT_EQ(max_abs_diff(copy.forward(x).value(), model.forward(x).value()), 0);
  models::GPT<float> from_file(tiny(), &other);
  from_file.load_state_dict(load_safetensors_state_dict<float>(dir + "gpt_tied.safetensors"));
  EXPECT_EQ(max_abs_diff(from_file.forward(x).value(), model.forward(x).value()), 0);
}
