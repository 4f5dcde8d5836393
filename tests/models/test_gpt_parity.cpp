// models::GPT against PyTorch 1.13, as llm.c's test_gpt2: the same initial weights and the same
// batches (tests/fixtures/gpt_parity_{float32,float64}.safetensors, written by
// scripts/make_gpt_fixture.py with the equivalent TorchGPT), 10 AdamW steps without dropout
// (nanoGPT's two groups: decay on the matrices only). Every step's loss and every final weight
// agree within 1e-4 (float32) or 1e-10 (float64), relative. Plus a double-precision gradcheck of
// the tiny GPT's loss with respect to every parameter (the tied wte.weight included).
#include "test_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <xgrad/models/gpt.hpp>
#include <xgrad/optim/adam.hpp>
#include <xgrad/serialize/safetensors.hpp>

using namespace xgrad;
using namespace xgrad::testing;

namespace {

// |got - want| / max(|want|, 1e-3 max|want of the tensor|) at the worst element: relative, with a
// floor at a thousandth of the tensor's scale for the entries that are almost zero.
template <class T>
double rel_error(const Array<T>& got, const Array<T>& want) {
  EXPECT_EQ(shape_of(got), shape_of(want));
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::abs(double(want.data()[i])));
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double b = want.data()[i];
    worst = std::max(worst, std::abs(double(got.data()[i]) - b) / std::max({std::abs(b), 1e-3 * scale, 1e-30}));
  }
  return worst;
}

template <class T>
void check_parity(const std::string& dtype, double tol) {
  SafetensorsMetadata meta;
  const std::string path = std::string(XGRAD_FIXTURES_DIR) + "/gpt_parity_" + dtype + ".safetensors";
  const NamedArrays<T> arrays = load_safetensors<T>(path, &meta);
  const auto get = [&](const std::string& key) -> const Array<T>& {
    for (const auto& [name, value] : arrays)
      if (name == key) return value;
    throw std::invalid_argument(path + " has no tensor " + key);
  };
  const auto integer = [&](const char* key) { return std::stoll(meta.at(key)); };
  models::GPTConfig c;
  c.vocab_size = integer("vocab_size");
  c.block_size = integer("block_size");
  c.n_layer = integer("n_layer");
  c.n_head = integer("n_head");
  c.n_embd = integer("n_embd");
  models::GPT<T> model(c);
  nn::StateDict<T> init, final_state;
  for (const auto& [name, value] : arrays) {
    if (name.rfind("init.", 0) == 0) init.insert(name.substr(5), value);
    if (name.rfind("final.", 0) == 0) final_state.insert(name.substr(6), value);
  }
  model.load_state_dict(init);

  std::vector<Tensor<T>> decay, no_decay;  // nanoGPT's configure_optimizers
  for (const auto& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  const auto options = optim::AdamWOptions(std::stod(meta.at("lr")))
                           .betas({std::stod(meta.at("beta1")), std::stod(meta.at("beta2"))})
                           .weight_decay(std::stod(meta.at("weight_decay")));
  optim::AdamW<T> opt({optim::ParamGroup<T>(decay), optim::ParamGroup<T>(no_decay, optim::AdamWOptions(options).weight_decay(0))},
                      options);

  const Array<T>& idx = get("batch.idx");  // (steps, B, T)
  const Array<T>& targets = get("batch.targets");
  const Array<T>& losses = get("losses");
  const std::size_t steps = idx.shape(0), B = idx.shape(1), L = idx.shape(2);
  double worst_loss = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    IndexArray x = IndexArray::from_shape({B, L}), y = IndexArray::from_shape({B * L});
    for (std::size_t i = 0; i < B * L; ++i) {
      x.data()[i] = static_cast<std::int64_t>(idx.data()[s * B * L + i]);
      y.data()[i] = static_cast<std::int64_t>(targets.data()[s * B * L + i]);
    }
    const Tensor<T> loss = cross_entropy(reshape(model.forward(x), {-1, c.vocab_size}), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    const double want = losses.data()[s], err = std::abs(double(loss.item()) - want) / std::abs(want);
    EXPECT_LE(err, tol) << dtype << " step " << s + 1 << ": loss " << loss.item() << ", torch " << want;
    worst_loss = std::max(worst_loss, err);
  }
  double worst_weight = 0;
  std::string worst_key;
  const nn::StateDict<T> got = model.state_dict();
  ASSERT_EQ(got.keys(), final_state.keys());
  for (const auto& [key, want] : final_state) {
    Array<T> mine = got.at(key), torch = want;
    if (key.size() > 12 && key.compare(key.size() - 12, 12, "in_proj_bias") == 0) {
      // The key bias (the middle third) adds q.b_k to every score of a row, which softmax ignores:
      // its gradient is exactly 0, in both frameworks rounding noise that Adam scales to +-lr.
      // Only the query and value biases are compared.
      const std::size_t E = std::size_t(c.n_embd);
      std::fill(mine.begin() + E, mine.begin() + 2 * E, T(0));
      std::fill(torch.begin() + E, torch.begin() + 2 * E, T(0));
    }
    const double err = rel_error(mine, torch);
    EXPECT_LE(err, tol) << dtype << " final " << key;
    if (err >= worst_weight) worst_weight = err, worst_key = key;
  }
  std::printf("[gpt parity %s] %zu steps: max rel diff of the losses %.3g, of the final weights %.3g (%s)\n",
              dtype.c_str(), steps, worst_loss, worst_weight, worst_key.c_str());
}

}  // namespace

TEST(GPTParity, TenAdamWStepsFloat32) { check_parity<float>("float32", 1e-4); }

TEST(GPTParity, TenAdamWStepsFloat64) { check_parity<double>("float64", 1e-10); }

TEST(GPTParity, GradcheckOfTheLoss) {
  models::GPTConfig c;
  c.vocab_size = 7;
  c.block_size = 5;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 4;
  Generator gen(3);
  models::GPT<double> model(c, &gen);
  for (auto& p : model.parameters()) {  // away from nanoGPT's tiny init, so every path matters
    Array<double>& v = p.mutable_value();
    for (std::size_t i = 0; i < v.size(); ++i) v.data()[i] += 0.3 * (gen.uniform() - 0.5);
  }
  IndexArray idx = IndexArray::from_shape({2, 5}), targets = IndexArray::from_shape({10});
  for (std::size_t i = 0; i < 10; ++i) {
    idx.data()[i] = std::int64_t(gen.next_u64() % 7);
    targets.data()[i] = std::int64_t(gen.next_u64() % 7);
  }
  const GradcheckResult r = gradcheck_parameters(
      [&] { return cross_entropy(reshape(model.forward(idx), {-1, c.vocab_size}), targets); },
      model.named_parameters());
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_EQ(r.inputs.size(), model.named_parameters().size());
}
