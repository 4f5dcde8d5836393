// gradient_checkpointing_enable() on LlamaForCausalLM (the tiny fixture tests/fixtures/hf-llama-tiny)
// and on GPT (with dropout): every parameter's gradient bit for bit the same with it as without,
// the default generator left where it is without it, the frozen-base case (only some parameters
// require grad), and no checkpointing in eval mode or under no_grad.
#include "test_util.hpp"

#include <map>
#include <set>
#include <string>

#include <xgrad/core/grad_mode.hpp>
#include <xgrad/models/gpt.hpp>
#include <xgrad/models/hf_llama.hpp>
#include <xgrad/models/llama.hpp>

using namespace xgrad;

namespace {

const std::string kFixture = std::string(XGRAD_FIXTURES_DIR) + "/hf-llama-tiny";

IndexArray tokens(std::size_t n, std::size_t t, std::int64_t vocab, std::uint64_t seed) {
  Generator g(seed);
  IndexArray x = IndexArray::from_shape({n, t});
  for (auto& v : x) v = std::int64_t(g.next_u64() % std::uint64_t(vocab));
  return x;
}

// One training step's gradients by parameter name (the generator seeded first), and the
// generator's state after the backward.
template <class M>
std::map<std::string, Array<float>> step_gradients(M& model, const IndexArray& x, const IndexArray& target,
                                                   GeneratorState& after) {
  model.zero_grad();
  manual_seed(5);
  const Tensor<float> logits = model.forward(x);
  IndexArray flat = target;
  flat.reshape({flat.size()});
  cross_entropy(reshape(logits, {-1, logits.size(2)}), flat).backward();
  after = default_generator().get_state();
  std::map<std::string, Array<float>> g;
  for (const auto& [name, p] : model.named_parameters())
    if (p.requires_grad()) g.emplace(name, p.grad());
  return g;
}

template <class M>
void expect_same_gradients_with_checkpointing(M& model, const IndexArray& x, const IndexArray& target) {
  GeneratorState plain_after, checkpointed_after;
  const auto plain = step_gradients(model, x, target, plain_after);
  model.gradient_checkpointing_enable();
  ASSERT_TRUE(model.is_gradient_checkpointing());
  const auto checkpointed = step_gradients(model, x, target, checkpointed_after);
  model.gradient_checkpointing_disable();
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (const auto& [name, g] : plain) EXPECT_TRUE(g == checkpointed.at(name)) << name << " differs";
  EXPECT_TRUE(plain_after == checkpointed_after) << "the recompute moved the default generator";
}

// Whether a CheckpointBackward node is in t's history.
bool checkpointed(const Tensor<float>& t) {
  std::vector<const Node<float>*> stack{t.node().get()};
  std::set<const Node<float>*> seen;
  while (!stack.empty()) {
    const Node<float>* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (std::string(n->op) == "CheckpointBackward") return true;
    for (const auto& in : n->inputs) stack.push_back(in.get());
  }
  return false;
}

models::GPTConfig tiny_gpt() {
  models::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 6;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 8;
  c.dropout = 0.2;
  return c;
}

}  // namespace

TEST(GradientCheckpointing, LlamaFixtureGradientsBitForBit) {
  auto model = models::load_hf_llama<float>(kFixture);
  model->train();
  const std::int64_t V = model->config().vocab_size;
  expect_same_gradients_with_checkpointing(*model, tokens(2, 7, V, 1), tokens(2, 7, V, 2));
}

// LoRA-style training of a frozen base: only some weights inside the layers require grad, and
// the layers' inputs (the embedding's output) do not.
TEST(GradientCheckpointing, LlamaFrozenBaseTrainsTheWeightsInsideTheLayers) {
  auto model = models::load_hf_llama<float>(kFixture);
  model->train();
  for (auto& [name, p] : model->named_parameters())
    p.requires_grad_(name.find("q_proj.weight") != std::string::npos || name.find("down_proj") != std::string::npos);
  const std::int64_t V = model->config().vocab_size;
  expect_same_gradients_with_checkpointing(*model, tokens(1, 5, V, 3), tokens(1, 5, V, 4));
}

TEST(GradientCheckpointing, GPTWithDropoutGradientsBitForBit) {
  models::GPT<float> model(tiny_gpt());
  model.train();
  expect_same_gradients_with_checkpointing(model, tokens(2, 6, 11, 1), tokens(2, 6, 11, 2));
}

// As transformers: only in training with grad mode on; the outputs are the same either way.
TEST(GradientCheckpointing, OnlyInTrainingWithGradEnabled) {
  models::GPT<float> model(tiny_gpt());
  model.gradient_checkpointing_enable();
  const IndexArray x = tokens(1, 4, 11, 1);
  model.eval();
  EXPECT_FALSE(checkpointed(model.forward(x)));
  model.train();
  manual_seed(1);
  const Tensor<float> train_logits = model.forward(x);
  EXPECT_TRUE(checkpointed(train_logits));
  manual_seed(1);
  {
    const NoGradGuard no_grad;
    const Tensor<float> no_grad_logits = model.forward(x);
    EXPECT_FALSE(no_grad_logits.requires_grad());
    EXPECT_TRUE(no_grad_logits.value() == train_logits.value());
  }
  model.gradient_checkpointing_disable();
  manual_seed(1);
  EXPECT_TRUE(model.forward(x).value() == train_logits.value());
}
